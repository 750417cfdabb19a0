// Every METAFUSE_* environment variable, read in one place with one rule.
//
// A flag is on when its variable is set to anything but "", "0", "false",
// "no" or "off" (any case). METAFUSE_DUMP_IR also takes a directory. The
// table in docs/options.md lists them all. Values are read on every call
// (tests and benchmarks change them at run time); reading is cheap.
#pragma once

#include <string>

namespace metafuse::runtime {

struct Options {
  bool fusion = true;                  // METAFUSE_DISABLE_FUSION turns it off
  bool buffer_reuse = true;            // METAFUSE_DISABLE_BUFFER_REUSE
  bool reduction_fusion = true;        // METAFUSE_DISABLE_REDUCTION_FUSION
  bool optimizer_elimination = true;   // METAFUSE_DISABLE_OPTIMIZER_ELIMINATION
  std::string dump_ir;                 // METAFUSE_DUMP_IR: "" off, "1" stderr, else a directory
  bool time_stages = false;            // METAFUSE_TIME_STAGES
  std::string kernel_cache_dir;        // METAFUSE_CACHE_DIR ("" = the per-user default)
  std::string host_backend;            // METAFUSE_HOST_BACKEND: "" default, "llvm", "cpp"
  std::string cxx;                     // METAFUSE_CXX: the C++ compiler ("" = find one)
  std::string split_convolutions;      // METAFUSE_SPLIT_CONVOLUTIONS: "" measure, "always", "never"
  bool strict = false;                 // METAFUSE_STRICT: a pass's internal error raises (tests)
  std::string fail_pass;               // METAFUSE_FAIL_PASS: this pass throws (tests)
};

// The options the environment sets now.
Options OptionsFromEnvironment();

// The one parsing rule for flags.
bool FlagIsOn(const char* value);

}  // namespace metafuse::runtime
