#include "runtime/base/options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace metafuse::runtime {

bool FlagIsOn(const char* value) {
  if (value == nullptr) return false;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return !(v.empty() || v == "0" || v == "false" || v == "no" || v == "off");
}

Options OptionsFromEnvironment() {
  auto flag = [](const char* name) { return FlagIsOn(std::getenv(name)); };
  auto text = [](const char* name) {
    const char* v = std::getenv(name);
    return FlagIsOn(v) ? std::string(v) : std::string();
  };
  Options o;
  o.fusion = !flag("METAFUSE_DISABLE_FUSION");
  o.buffer_reuse = !flag("METAFUSE_DISABLE_BUFFER_REUSE");
  o.reduction_fusion = !flag("METAFUSE_DISABLE_REDUCTION_FUSION");
  o.optimizer_elimination = !flag("METAFUSE_DISABLE_OPTIMIZER_ELIMINATION");
  o.dump_ir = text("METAFUSE_DUMP_IR");
  o.time_stages = flag("METAFUSE_TIME_STAGES");
  o.kernel_cache_dir = text("METAFUSE_CACHE_DIR");
  o.host_backend = text("METAFUSE_HOST_BACKEND");
  o.cxx = text("METAFUSE_CXX");
  o.split_convolutions = text("METAFUSE_SPLIT_CONVOLUTIONS");
  o.strict = flag("METAFUSE_STRICT");
  o.fail_pass = text("METAFUSE_FAIL_PASS");
  return o;
}

}  // namespace metafuse::runtime
