// The small-reduction runtime operations against ATen: every form
// (sum_to_size over rows, over columns, to one element; full sum and mean),
// float32 and float64, and the fallback for a non-contiguous input.
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "tests/cpp/compiler/specialized_runner.h"

namespace metafuse::compiler {
namespace {

TEST(ReductionOperation, MatchesAtenForEveryForm) {
  for (const char* target : {"[7]", "[1, 7]", "[5, 1]", "[1, 1]", "[1]"}) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
      auto graph = std::make_shared<torch::jit::Graph>();
      torch::jit::parseIR(std::string(R"IR(
graph(%x : Tensor):
  %size : int[] = prim::Constant[value=)IR") + target + R"IR(]()
  %none : NoneType = prim::Constant()
  %s : Tensor = aten::sum_to_size(%x, %size)
  %total : Tensor = aten::sum(%x, %none)
  %m : Tensor = aten::mean(%x, %none)
  return (%s, %total, %m)
)IR", graph.get());
      SpecializedRunner fast(graph->copy(), "reduce", nullptr);
      SpecializedRunner aten(graph->copy(), "aten", nullptr);
      aten.set_fusion(false);
      const double tol = dtype == torch::kFloat32 ? 1e-5 : 1e-12;
      at::Tensor x = torch::randn({5, 7}, torch::TensorOptions().dtype(dtype));
      for (const at::Tensor& in : {x, torch::randn({7, 5}, x.options()).t()}) {
        auto got = fast.Run({in});
        auto want = aten.Run({in});
        for (size_t k = 0; k < want.size(); ++k) {
          const at::Tensor& g = got[k].toTensor();
          const at::Tensor& w = want[k].toTensor();
          EXPECT_EQ(g.sizes(), w.sizes()) << target << " output " << k;
          EXPECT_TRUE(torch::allclose(g, w, tol, tol)) << target << " output " << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace metafuse::compiler
