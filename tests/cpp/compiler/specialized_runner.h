// Test helper: runs one graph the way the pipeline's phase 2 treats it
// (pipeline.h, SpecializeGraph) on its first call, then that program; with
// fusion off, the graph lowered as it is. Lets pass tests compare fused and
// unfused results of standalone graphs.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

#include "compiler/ir/ir_dump.h"
#include "compiler/lowering/lower_to_program.h"
#include "compiler/pipeline.h"
#include "compiler/callable/signature_cache.h"
#include "runtime/executor/program.h"

namespace metafuse::compiler {

// A graph from TorchScript IR text (the pass tests' inputs).
inline std::shared_ptr<torch::jit::Graph> ParseGraph(const std::string& ir) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

class SpecializedRunner {
 public:
  SpecializedRunner(std::shared_ptr<torch::jit::Graph> graph, std::string label, StageLog* log)
      : graph_(std::move(graph)), label_(std::move(label)), log_(log) {}
  void set_fusion(bool enabled) { fusion_ = enabled; }

  std::vector<c10::IValue> Run(std::vector<c10::IValue> inputs) {
    if (!fusion_) {
      if (!generic_) generic_.emplace(LowerToProgram(*graph_, label_));
      return generic_->Run(std::move(inputs));
    }
    std::vector<int64_t> signature = runtime::InputSignature(inputs);
    const auto* found = programs_.Find(signature);
    if (found == nullptr) {
      SpecializedGraph s =
          SpecializeGraph(*graph_, inputs, runtime::OptionsFromEnvironment(), label_, log_);
      report_ = s.report;
      found = &programs_.Insert(std::move(signature),
                                std::make_unique<runtime::Program>(std::move(s.code)));
    }
    return (*found)->Run(std::move(inputs));
  }
  const SpecializationReport& report() const { return report_; }
  // The program of the most recently used specialization, or nullptr.
  const runtime::Program* specialized() const {
    const auto* last = programs_.last();
    return last != nullptr ? last->get() : nullptr;
  }

 private:
  std::shared_ptr<torch::jit::Graph> graph_;
  std::string label_;
  StageLog* log_;
  bool fusion_ = true;
  SpecializationReport report_;
  std::optional<runtime::Program> generic_;
  SignatureCache<std::unique_ptr<runtime::Program>> programs_;
};

// Runs `ir` specialized (every pass) and as it is on `inputs()`, twice (the
// second run reuses the specialized program): the same sizes, dtypes and
// values to rtol / atol (0 and 0: bit for bit).
inline void ExpectSpecializedEqualsGeneric(const std::string& ir,
                                           const std::function<std::vector<c10::IValue>()>& inputs,
                                           double rtol, double atol) {
  SpecializedRunner fused(ParseGraph(ir), "specialized", nullptr);
  SpecializedRunner generic(ParseGraph(ir), "generic", nullptr);
  generic.set_fusion(false);
  for (int run = 0; run < 2; ++run) {
    const auto got = fused.Run(inputs());
    const auto want = generic.Run(inputs());
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      const at::Tensor a = got[k].toTensor(), b = want[k].toTensor();
      EXPECT_EQ(a.sizes(), b.sizes()) << "output " << k;
      EXPECT_EQ(a.scalar_type(), b.scalar_type()) << "output " << k;
      EXPECT_TRUE(rtol == 0 && atol == 0 ? at::equal(a, b) : at::allclose(a, b, rtol, atol))
          << "output " << k;
    }
  }
}

}  // namespace metafuse::compiler
