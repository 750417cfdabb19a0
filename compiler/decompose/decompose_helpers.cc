// The helpers every decomposition family shares (decompose_rewrite.h):
// constants and ranks of values, typed results, filled tensors, selects,
// log-softmax and softplus, crops and concatenation, a zero-safe sqrt.
#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <set>
#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/torch.h>

#include "compiler/ir/primitives.h"

namespace metafuse::compiler {
namespace decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Symbol;
using torch::jit::Value;
using torch::jit::WithInsertPoint;

c10::optional<c10::IValue> ConstantOf(Value* v) {
  return torch::jit::toIValue(v);
}

thread_local std::string last_rejection;

Value* Reject(const std::string& why) {
  last_rejection = why;
  return nullptr;
}

int64_t TensorRank(Value* v) {
  auto type = v->type()->cast<c10::TensorType>();
  if (!type) return -1;
  auto dim = type->dim();
  return dim ? static_cast<int64_t>(*dim) : -1;
}

bool IsNone(Value* v) { return v->type()->kind() == c10::TypeKind::NoneType; }

// A constant dtype argument that is already `x`'s scalar type (a no-op cast).
bool IsInputDtype(Value* dtype, Value* x) {
  auto d = ConstantOf(dtype);
  auto t = x->type()->cast<c10::TensorType>();
  return d && d->isInt() && t && t->scalarType() &&
         static_cast<int64_t>(*t->scalarType()) == d->toInt();
}



// softplus(x) = log(exp(0) + exp(x)) = logsumexp over a new leading dim of
// [0 * x, x]: stable for any x, and its derivative (softmax weights) gives
// sigmoid(x) exactly, 1/2 at 0 included.
Value* Softplus(Graph& g, Value* x, int64_t rank) {
  std::vector<int64_t> shape(static_cast<size_t>(rank) + 1, 1);
  shape[0] = 2;
  at::Tensor selector =
      torch::tensor({0.0, 1.0}, at::TensorOptions().dtype(at::kDouble))
          .reshape(shape);
  Value* weights = InsertOp(g, "aten::type_as", {g.insertConstant(selector), x});
  Value* stacked =
      InsertOp(g, "aten::mul",
             {InsertOp(g, "aten::unsqueeze", {x, g.insertConstant(0)}), weights});
  return InsertOp(g, "aten::logsumexp",
                {stacked, g.insertConstant(std::vector<int64_t>{0}),
                 g.insertConstant(false)});
}

// cat(tensors, dim) with statically known sizes along dim: each piece is
// zero-padded to its place along dim (constant_pad_nd, whose derivative is
// the crop) and the pieces are summed; no list in the differentiated graph.
// x[..., begin:end, ...] along `dim` (static sizes): constant_pad_nd with
// negative padding crops, and its derivative pads the gradient back.
Value* Crop(Graph& g, Value* x, int64_t dim, int64_t begin, int64_t end) {
  const int64_t rank = TensorRank(x);
  auto type = x->type()->cast<c10::TensorType>();
  auto sizes = type ? type->sizes().concrete_sizes() : c10::nullopt;
  if (rank < 1 || !sizes) return Reject("an input of static shape expected");
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return Reject("dim out of range");
  const int64_t size = (*sizes)[dim];
  begin = std::clamp<int64_t>(begin < 0 ? begin + size : begin, 0, size);
  end = std::clamp<int64_t>(end < 0 ? end + size : end, begin, size);
  std::vector<int64_t> pad(2 * (rank - dim), 0);  // pairs from the last dim back
  pad[2 * (rank - 1 - dim)] = -begin;
  pad[2 * (rank - 1 - dim) + 1] = -(size - end);
  return InsertOp(g, "aten::constant_pad_nd", {x, g.insertConstant(pad), g.insertConstant(0.0)});
}

Value* Concatenate(Graph& g, const std::vector<Value*>& pieces, int64_t dim) {
  if (pieces.empty())
    return Reject("a tensor list built in the graph expected");
  const int64_t rank = TensorRank(pieces[0]);
  if (rank < 1) return Reject("tensors of known rank >= 1 expected");
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return Reject("dim out of range");
  std::vector<int64_t> lengths;
  for (Value* piece : pieces) {
    auto type = piece->type()->cast<c10::TensorType>();
    auto sizes = type ? type->sizes().concrete_sizes() : c10::nullopt;
    if (!sizes || static_cast<int64_t>(sizes->size()) != rank) {
      return Reject("tensors of static shape and equal rank expected");
    }
    lengths.push_back((*sizes)[dim]);
  }
  if (pieces.size() == 1) return InsertOp(g, "aten::clone", {pieces[0]});
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  Value* out = nullptr;
  int64_t offset = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    // pad pairs run from the last dim back to `dim`.
    std::vector<int64_t> pad(2 * (rank - dim), 0);
    pad[2 * (rank - 1 - dim)] = offset;
    pad[2 * (rank - 1 - dim) + 1] = total - offset - lengths[i];
    offset += lengths[i];
    Value* placed =
        InsertOp(g, "aten::constant_pad_nd",
               {pieces[i], g.insertConstant(pad), g.insertConstant(0.0)});
    out = out ? InsertOp(g, "aten::add", {out, placed}) : placed;
  }
  return out;
}

// The tensors of a list built in the graph, or empty.
std::vector<Value*> ListElements(Value* list) {
  if (list->node()->kind() != torch::jit::prim::ListConstruct) return {};
  return {list->node()->inputs().begin(), list->node()->inputs().end()};
}

// A tensor like x filled with c (no gradient flows to it).
Value* Filled(Graph& g, Value* x, double c) {
  return InsertOp(g, "aten::add",
                {InsertOp(g, "aten::zeros_like", {x}), g.insertConstant(c)});
}

// where(cond, a, b) with every branch finite: the untaken branch gets a
// zero cotangent, which must not meet an inf (0 * inf = nan).
Value* Select(Graph& g, const char* cmp, Value* x, Value* y, Value* a,
              Value* b) {
  return InsertOp(g, "aten::where", {InsertOp(g, cmp, {x, y}), a, b});
}

std::optional<std::vector<int64_t>> StaticSizes(Value* v) {
  auto type = v->type()->cast<c10::TensorType>();
  auto sizes = type ? type->sizes().concrete_sizes() : c10::nullopt;
  if (!sizes) return std::nullopt;
  return *sizes;
}

int64_t Count(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Value* WithTypeOf(Value* v, Value* like) {
  v->setType(like->type());
  return v;
}

Value* WithSizes(Value* v, Value* like, const std::vector<int64_t>& sizes) {
  v->setType(like->type()->expect<c10::TensorType>()->withSizes(sizes));
  return v;
}

Value* SqrtZeroSafe(Graph& g, Value* s) {
  Value* zero = Filled(g, s, 0.0);
  Value* positive = InsertOp(g, "aten::gt", {s, zero});
  Value* safe = InsertOp(g, "aten::where", {positive, s, Filled(g, s, 1.0)});
  return InsertOp(g, "aten::where", {positive, InsertOp(g, "aten::sqrt", {safe}), zero});
}

Value* LogSoftmax(Graph& g, Value* x, int64_t dim) {
  Value* dims = g.insertConstant(std::vector<int64_t>{dim});
  Value* lse = InsertOp(g, "aten::logsumexp", {x, dims, g.insertConstant(true)});
  return InsertOp(g, "aten::sub", {x, lse});
}

}  // namespace decompose_internal
}  // namespace metafuse::compiler
