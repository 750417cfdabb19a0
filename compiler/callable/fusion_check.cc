#include "compiler/callable/fusion_check.h"

#include <cstdlib>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/tuning/measured_choice.h"
#include "runtime/tuning/timing_rule.h"

namespace metafuse::compiler {
namespace {

bool CheckEnabled() {
  const char* value = std::getenv("METAFUSE_FUSION_CHECK");
  const std::string v = value == nullptr ? "1" : value;
  TORCH_CHECK(v == "0" || v == "1", "metafuse: METAFUSE_FUSION_CHECK must be 0 or 1, got '", v,
              "'");
  return v == "1";
}

std::string Signature(const std::vector<at::Tensor>& inputs) {
  std::string out;
  for (size_t i = 0; i < inputs.size() && i < 4; ++i) {
    absl::StrAppend(&out, i ? " " : "", c10::toString(inputs[i].scalar_type()), "[",
                    absl::StrJoin(inputs[i].sizes(), ", "), "]");
  }
  if (inputs.size() > 4) absl::StrAppend(&out, " +", inputs.size() - 4, " more");
  return out;
}

// Saves the default CPU generator's state, restores it when destroyed.
class CpuGeneratorRestored {
 public:
  CpuGeneratorRestored() : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~CpuGeneratorRestored() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }

 private:
  at::Generator generator_;
  at::Tensor state_;
};

}  // namespace

std::optional<FusionChoice> CheckFusion(SpecializingFunction& function,
                                        const std::vector<at::Tensor>& inputs,
                                        const std::string& label) {
  if (!function.fusion() || !CheckEnabled()) return std::nullopt;
  std::vector<at::Tensor> copies, wanted;
  for (const at::Tensor& t : inputs) {
    at::Tensor copy = t.detach();
    if (t.requires_grad() && t.is_floating_point()) {
      copy.requires_grad_(true);
      wanted.push_back(copy);
    }
    copies.push_back(copy);
  }
  auto once = [&] {
    std::vector<at::Tensor> outputs, seeds;
    for (const at::Tensor& out : function(copies)) {
      if (!out.requires_grad()) continue;
      outputs.push_back(out);
      seeds.push_back(at::ones_like(out));
    }
    if (!outputs.empty() && !wanted.empty()) {
      torch::autograd::grad(outputs, wanted, seeds, /*retain_graph=*/false,
                            /*create_graph=*/false, /*allow_unused=*/true);
    }
  };
  FusionChoice choice;
  {
    // The CPU generator as the caller left it, whatever the timed calls
    // drew or threw; fusion back on if they threw.
    CpuGeneratorRestored restored;
    try {
      function.set_fusion(true);
      choice.fused_seconds = runtime::SecondsOf(once);
      function.set_fusion(false);
      choice.unfused_seconds = runtime::SecondsOf(once);
    } catch (...) {
      function.set_fusion(true);
      throw;
    }
  }
  // The specialized programs are the default: the generic ones must beat
  // them by the rule's margin.
  choice.fusion = !runtime::BeatsDefault(choice.unfused_seconds, choice.fused_seconds);
  function.set_fusion(choice.fusion);
  runtime::ChoiceRecord record;
  record.table = "fusion";
  record.key = absl::StrCat(label, ": ", Signature(inputs));
  record.choice = choice.fusion ? "fused" : "unfused";
  record.note = absl::StrCat("fused ", choice.fused_seconds * 1e6, " us, unfused ",
                             choice.unfused_seconds * 1e6, " us");
  runtime::RecordChoice(record);
  return choice;
}

}  // namespace metafuse::compiler
