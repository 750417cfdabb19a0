#include "compiler/decompose/split_chunks.h"

#include <string>
#include <vector>

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"
#include "compiler/ir/primitives.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// The [begin, end) bounds along the dim of each piece, or empty when `n`
// is not a chunk or split with constant arguments of a static-shape input.
std::vector<std::pair<int64_t, int64_t>> PieceBounds(Node* n,
                                                     int64_t* dim_out) {
  const std::string name = OpName(n);
  const bool chunk = name == "aten::chunk" || name == "aten::unsafe_chunk";
  const bool split = name == "aten::split" || name == "aten::unsafe_split";
  const bool sizes = name == "aten::split_with_sizes" ||
                     name == "aten::unsafe_split_with_sizes";
  const bool unbind = name == "aten::unbind" && n->inputs().size() == 2;
  if ((!chunk && !split && !sizes && !unbind) ||
      (!unbind && n->inputs().size() != 3))
    return {};
  auto shape = decompose_internal::StaticSizes(n->input(0));
  auto dim = torch::jit::toIValue(n->input(unbind ? 1 : 2));
  if (!shape || !dim || !dim->isInt()) return {};
  const int64_t rank = static_cast<int64_t>(shape->size());
  int64_t d = dim->toInt() < 0 ? dim->toInt() + rank : dim->toInt();
  if (d < 0 || d >= rank) return {};
  const int64_t length = (*shape)[d];
  std::vector<int64_t> lengths;
  if (unbind) {
    lengths.assign(length, 1);
  } else if (sizes) {
    auto given = ConstantIntList(n->input(1));
    if (!given) return {};
    lengths = *given;
  } else {
    auto count = torch::jit::toIValue(n->input(1));
    if (!count || !count->isInt() || count->toInt() <= 0) return {};
    // chunk: ceil(length / chunks) per piece; split: the given size.
    const int64_t piece =
        chunk ? (length + count->toInt() - 1) / count->toInt() : count->toInt();
    for (int64_t at = 0; at < length || (at == 0 && length == 0); at += piece) {
      lengths.push_back(std::min(piece, length - at));
      if (piece == 0) break;
    }
  }
  std::vector<std::pair<int64_t, int64_t>> bounds;
  int64_t begin = 0;
  for (int64_t l : lengths) {
    bounds.emplace_back(begin, begin + l);
    begin += l;
  }
  if (begin != length) return {};
  *dim_out = d;
  return bounds;
}

}  // namespace

int64_t SplitChunksIntoCrops(const std::shared_ptr<torch::jit::Graph>& graph) {
  int64_t rewritten = 0;
  std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  for (Node* n : nodes) {
    if (n->outputs().size() != 1 || n->output()->uses().size() != 1) continue;
    Node* unpack = n->output()->uses()[0].user;
    if (unpack->kind() != torch::jit::prim::ListUnpack) continue;
    int64_t dim = 0;
    auto bounds = PieceBounds(n, &dim);
    if (bounds.empty() || bounds.size() != unpack->outputs().size()) continue;
    torch::jit::WithInsertPoint guard(unpack);
    const bool unbind =
        OpName(n) == "aten::unbind";  // (each piece drops the dim)
    for (size_t i = 0; i < bounds.size(); ++i) {
      Value* piece = decompose_internal::Crop(
          *graph, n->input(0), dim, bounds[i].first, bounds[i].second);
      if (piece == nullptr)
        return rewritten;  // (a static shape was checked above)
      if (unbind) {
        auto kept = *decompose_internal::StaticSizes(n->input(0));
        kept[dim] = 1;
        piece->setType(
            n->input(0)->type()->expect<c10::TensorType>()->withSizes(kept));
        piece = InsertOp(*graph, "aten::squeeze",
                         {piece, graph->insertConstant(dim)});
      }
      piece->setType(unpack->output(i)->type());
      unpack->output(i)->replaceAllUsesWith(piece);
    }
    unpack->destroy();
    n->destroy();
    ++rewritten;
  }
  return rewritten;
}

}  // namespace metafuse::compiler
