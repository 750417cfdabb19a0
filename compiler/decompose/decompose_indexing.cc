// Decompositions of indexing, masking and rearranging ops
// (decompose_rewrite.h): index_select, x[index] with one index tensor,
// x[arange(n), index] (a Q-value per row), arange of constants, one_hot,
// flip, repeat, masked_fill, tril / triu, padding (every mode), nearest
// upsampling. Rows are picked by gather, whose derivative scatter-adds
// (eager's index, padding and upsampling backwards accumulate the same
// way); masks are where's, so the masked-out entries get no gradient, as
// eager's.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

namespace metafuse::compiler::decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

// x's entries at `index` (1-D, [k]) along dim: index_select (x's sizes with
// that dim k).
Value* SelectAlong(Graph& g, Value* x, int64_t dim, Value* index, int64_t k) {
  auto sizes = StaticSizes(x);
  if (!sizes) return Reject("an input of static shape expected");
  const int64_t rank = static_cast<int64_t>(sizes->size());
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return Reject("dim out of range");
  std::vector<int64_t> column(rank, 1), picked = *sizes;
  column[dim] = k;
  picked[dim] = k;
  Value* shaped =
      WithSizes(InsertOp(g, "aten::reshape", {index, g.insertConstant(column)}),
                index, column);
  Value* spread =
      WithSizes(InsertOp(g, "aten::expand", {shaped, g.insertConstant(picked)}),
                index, picked);
  return WithSizes(
      InsertOp(g, "aten::gather", {x, g.insertConstant(dim), spread}), x,
      picked);
}

// A constant 1-D long tensor equal to arange(n), or false.
bool IsConstantArange(Value* v, int64_t n) {
  auto value = ConstantOf(v);
  if (!value || !value->isTensor()) return false;
  const at::Tensor& t = value->toTensor();
  return t.dim() == 1 && t.size(0) == n && t.scalar_type() == at::kLong &&
         t.equal(torch::arange(n, at::kLong));
}

// tril / triu (x, diagonal): x where the constant triangle keeps it, else 0.
Value* Triangle(Graph& g, Node* n, bool lower) {
  auto diagonal = ConstantOf(n->input(1));
  auto sizes = StaticSizes(n->input(0));
  if (!diagonal || !diagonal->isInt() || !sizes || sizes->size() < 2)
    return Reject(
        "a constant diagonal and an input of static shape, rank >= 2, "
        "expected");
  at::Tensor ones =
      torch::ones({(*sizes)[sizes->size() - 2], sizes->back()}, at::kBool);
  at::Tensor keep =
      lower ? ones.tril(diagonal->toInt()) : ones.triu(diagonal->toInt());
  return InsertOp(
      g, "aten::where",
      {g.insertConstant(keep), n->input(0), Filled(g, n->input(0), 0.0)});
}

// x padded along its last pad.size() / 2 dims (pairs from the last dim
// back) with copies of its own entries: "reflect" mirrors without the edge,
// "replicate" repeats the edge, "circular" wraps around. Each dim is one
// gather of constant source indices.
Value* PadWithCopies(Graph& g, Value* x, const std::vector<int64_t>& pad,
                     const std::string& mode) {
  auto sizes = StaticSizes(x);
  if (!sizes) return Reject("an input of static shape expected");
  const int64_t rank = static_cast<int64_t>(sizes->size());
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size() / 2) > rank)
    return Reject("pairs of paddings, at most one pair per dim, expected");
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t dim = rank - 1 - static_cast<int64_t>(i);
    const int64_t before = pad[2 * i], after = pad[2 * i + 1];
    const int64_t n = (*sizes)[dim];
    if (before == 0 && after == 0) continue;
    if (before < 0 || after < 0 || n == 0)
      return Reject(
          "non-negative padding of a non-empty dim expected in mode " + mode);
    if ((mode == "reflect" && (before >= n || after >= n)) ||
        (mode == "circular" && (before > n || after > n)))
      return Reject("padding larger than the dim in mode " + mode);
    const int64_t k = n + before + after;
    at::Tensor index = torch::empty({k}, at::kLong);
    int64_t* source = index.data_ptr<int64_t>();
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = j - before;
      if (mode == "reflect") {
        source[j] = s < 0 ? -s : (s >= n ? 2 * (n - 1) - s : s);
      } else if (mode == "replicate") {
        source[j] = std::clamp<int64_t>(s, 0, n - 1);
      } else {
        source[j] = ((s % n) + n) % n;
      }
    }
    x = SelectAlong(g, x, dim, g.insertConstant(index), k);
    if (x == nullptr) return nullptr;
  }
  return x;
}

// The source index of output entry j along a dim of `in` entries upsampled
// to `out` (nearest, or nearest-exact): ATen's float arithmetic
// (UpSample.h's nearest_idx and nearest_neighbor_exact_compute_source_index),
// so every pick is eager's.
int64_t NearestSource(int64_t j, int64_t in, int64_t out,
                      std::optional<double> scale_factor, bool exact) {
  if (!exact && out == in) return j;
  if (!exact && out == 2 * in) return j >> 1;
  const float scale = scale_factor && *scale_factor > 0.
                          ? static_cast<float>(1.0 / *scale_factor)
                          : static_cast<float>(in) / out;
  const float at = exact ? floorf((j + 0.5) * scale) : floorf(j * scale);
  return std::min(static_cast<int64_t>(at), in - 1);
}

// upsample_nearest{1,2,3}d / _upsample_nearest_exact{1,2,3}d, either
// overload: (x, output_size, scale_factors[]) or (x, output_size, scale per
// spatial dim...). Each spatial dim is one gather of its source indices.
Value* UpsampleNearest(Graph& g, Node* n, int64_t spatial, bool exact) {
  auto sizes = StaticSizes(n->input(0));
  auto out = StaticSizes(n->output());
  if (!sizes || !out || static_cast<int64_t>(sizes->size()) != spatial + 2)
    return Reject("an input of static shape (batch, channels, " +
                  std::to_string(spatial) + " spatial dims) expected");
  std::vector<std::optional<double>> scales(spatial);
  std::vector<Value*> factors = ListElements(n->input(2));  // a traced float[]
  if (auto list = ConstantOf(n->input(2)); list && list->isDoubleList()) {
    factors.clear();
    for (double f : list->toDoubleVector())
      factors.push_back(g.insertConstant(f));
  }
  if (!factors.empty()) {
    if (static_cast<int64_t>(factors.size()) != spatial)
      return Reject("one scale factor per spatial dim expected");
    for (int64_t d = 0; d < spatial; ++d) {
      scales[d] = ConstantNumber(factors[d]);
      if (!scales[d]) return Reject("constant scale factors expected");
    }
  } else if (static_cast<int64_t>(n->inputs().size()) == 2 + spatial) {
    for (int64_t d = 0; d < spatial; ++d) {
      if (IsNone(n->input(2 + d))) continue;
      auto scale = ConstantOf(n->input(2 + d));
      if (!scale || !scale->isDouble())
        return Reject("constant scales expected");
      scales[d] = scale->toDouble();
    }
  } else if (!IsNone(n->input(2))) {
    return Reject("constant scale factors expected");
  }
  Value* x = n->input(0);
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t dim = 2 + d, in = (*sizes)[dim], k = (*out)[dim];
    if (in == 0) return Reject("a non-empty input expected");
    at::Tensor index = torch::empty({k}, at::kLong);
    int64_t* source = index.data_ptr<int64_t>();
    for (int64_t j = 0; j < k; ++j)
      source[j] = NearestSource(j, in, k, scales[d], exact);
    x = SelectAlong(g, x, dim, g.insertConstant(index), k);
    if (x == nullptr) return nullptr;
  }
  return x;
}

}  // namespace

const RewriteTable& IndexingRewrites() {
  static const RewriteTable* const rewrites = [] {
    auto* table = new RewriteTable{
        {"aten::index_select",  // (x, dim, index)
         [](Graph& g, Node* n) -> Value* {
           auto dim = ConstantOf(n->input(1));
           auto index = StaticSizes(n->input(2));
           if (!dim || !dim->isInt() || !index || index->size() > 1)
             return Reject("a constant dim and a 1-D index expected");
           return SelectAlong(g, n->input(0), dim->toInt(), n->input(2),
                              index->empty() ? 1 : (*index)[0]);
         }},
        {"aten::index",
         // (x, [index]): rows of x at an index tensor of any shape; or
         // (x, [arange(n), index]) with n = x's rows: one entry per row
         [](Graph& g, Node* n) -> Value* {
           std::vector<Value*> indices = ListElements(n->input(1));
           auto sizes = StaticSizes(n->input(0));
           auto out = StaticSizes(n->output());
           if (!sizes || !out || indices.empty())
             return Reject(
                 "an input of static shape and index tensors expected");
           for (Value* index : indices) {
             auto t = index->type()->cast<c10::TensorType>();
             if (!t || t->scalarType() != at::kLong)
               return Reject(
                   "long index tensors expected (masks and None are not "
                   "compiled)");
           }
           if (indices.size() == 1) {
             auto shape = StaticSizes(indices[0]);
             if (!shape) return Reject("an index of static shape expected");
             const int64_t k = Count(*shape);
             Value* flat = WithSizes(
                 InsertOp(
                     g, "aten::reshape",
                     {indices[0], g.insertConstant(std::vector<int64_t>{k})}),
                 indices[0], {k});
             Value* rows = SelectAlong(g, n->input(0), 0, flat, k);
             if (rows == nullptr) return nullptr;
             return InsertOp(g, "aten::reshape",
                             {rows, g.insertConstant(*out)});
           }
           auto second =
               StaticSizes(indices.size() == 2 ? indices[1] : indices[0]);
           if (indices.size() == 2 && sizes->size() >= 2 && second &&
               second->size() == 1 && (*second)[0] == (*sizes)[0] &&
               IsConstantArange(indices[0], (*sizes)[0])) {
             std::vector<int64_t> column = {(*sizes)[0], 1};
             for (size_t d = 2; d < sizes->size(); ++d)
               column.push_back((*sizes)[d]);
             std::vector<int64_t> one_per_row = column;
             for (size_t d = 2; d < column.size(); ++d) one_per_row[d] = 1;
             Value* shaped = WithSizes(
                 InsertOp(g, "aten::reshape",
                          {indices[1], g.insertConstant(one_per_row)}),
                 indices[1], one_per_row);
             Value* spread =
                 WithSizes(InsertOp(g, "aten::expand",
                                    {shaped, g.insertConstant(column)}),
                           indices[1], column);
             Value* picked =
                 WithSizes(InsertOp(g, "aten::gather",
                                    {n->input(0), g.insertConstant(1), spread}),
                           n->input(0), column);
             return InsertOp(g, "aten::reshape",
                             {picked, g.insertConstant(*out)});
           }
           return Reject(
               "one index tensor, or arange(rows) and one index per row, "
               "expected");
         }},
        {"aten::arange",  // constant bounds: the tensor itself
         [](Graph& g, Node* n) -> Value* {
           auto out = n->output()->type()->cast<c10::TensorType>();
           std::vector<double> bounds;
           for (size_t i = 0; i + 4 < n->inputs().size(); ++i) {
             auto bound = ConstantNumber(n->input(i));
             if (!bound) return Reject("constant start / end / step expected");
             bounds.push_back(*bound);
           }
           if (!out || !out->scalarType() || bounds.empty() ||
               bounds.size() > 3)
             return Reject("constant bounds and a known dtype expected");
           const double start = bounds.size() > 1 ? bounds[0] : 0.0;
           const double end = bounds.size() > 1 ? bounds[1] : bounds[0];
           const double step = bounds.size() > 2 ? bounds[2] : 1.0;
           return g.insertConstant(
               torch::arange(start, end, step,
                             at::TensorOptions().dtype(*out->scalarType())));
         }},
        {"aten::one_hot",  // (index, classes): index == arange(classes), as
                           // long
         [](Graph& g, Node* n) -> Value* {
           auto out = StaticSizes(n->output());
           auto index = StaticSizes(n->input(0));
           if (!out || !index || out->empty())
             return Reject("static shapes expected");
           std::vector<int64_t> column = *index;
           column.push_back(1);
           Value* shaped =
               WithSizes(InsertOp(g, "aten::reshape",
                                  {n->input(0), g.insertConstant(column)}),
                         n->input(0), column);
           Value* classes =
               g.insertConstant(torch::arange(out->back(), at::kLong));
           Value* hit = InsertOp(g, "aten::eq", {shaped, classes});
           return InsertOp(
               g, "aten::type_as",
               {hit, g.insertConstant(torch::zeros({}, at::kLong))});
         }},
        {"aten::flip",  // (x, dims): each dim read backwards
         [](Graph& g, Node* n) -> Value* {
           auto dims = ConstantIntList(n->input(1));
           auto sizes = StaticSizes(n->input(0));
           if (!dims || !sizes)
             return Reject(
                 "constant dims and an input of static shape expected");
           Value* out = n->input(0);
           const int64_t rank = static_cast<int64_t>(sizes->size());
           for (int64_t d : *dims) {
             if (d < 0) d += rank;
             if (d < 0 || d >= rank) return Reject("dim out of range");
             const int64_t k = (*sizes)[d];
             Value* reversed =
                 g.insertConstant(torch::arange(k - 1, -1, -1, at::kLong));
             out = SelectAlong(g, out, d, reversed, k);
             if (out == nullptr) return nullptr;
           }
           return out;
         }},
        {"aten::repeat",  // (x, repeats): interleaved size-1 dims expanded,
                          // then merged
         [](Graph& g, Node* n) -> Value* {
           auto repeats = ConstantIntList(n->input(1));
           auto sizes = StaticSizes(n->input(0));
           if (!repeats || !sizes || repeats->size() < sizes->size())
             return Reject(
                 "constant repeats (at least one per dim) and a static shape "
                 "expected");
           std::vector<int64_t> padded(repeats->size() - sizes->size(), 1);
           padded.insert(padded.end(), sizes->begin(), sizes->end());
           std::vector<int64_t> spaced, stretched, merged;
           for (size_t d = 0; d < padded.size(); ++d) {
             spaced.insert(spaced.end(), {1, padded[d]});
             stretched.insert(stretched.end(), {(*repeats)[d], padded[d]});
             merged.push_back((*repeats)[d] * padded[d]);
           }
           Value* x =
               WithSizes(InsertOp(g, "aten::reshape",
                                  {n->input(0), g.insertConstant(spaced)}),
                         n->input(0), spaced);
           x = WithSizes(
               InsertOp(g, "aten::expand", {x, g.insertConstant(stretched)}),
               n->input(0), stretched);
           // (reshape may keep the stretched dims as a stride-0 view; eager's
           // repeat is contiguous, and a later view may need that)
           Value* out = WithSizes(
               InsertOp(g, "aten::reshape", {x, g.insertConstant(merged)}),
               n->input(0), merged);
           return InsertOp(g, "aten::contiguous", {out});
         }},
        {"aten::masked_fill",  // (x, mask, value): where(mask, value, x)
         [](Graph& g, Node* n) -> Value* {
           Value* value = n->input(2);
           if (!IsTensor(value)) {
             auto number = ConstantNumber(value);
             if (!number)
               return Reject("a constant or tensor fill value expected");
             value = Filled(g, n->input(0), *number);
           }
           return InsertOp(g, "aten::where", {n->input(1), value, n->input(0)});
         }},
        {"aten::tril",
         [](Graph& g, Node* n) -> Value* { return Triangle(g, n, true); }},
        {"aten::triu",
         [](Graph& g, Node* n) -> Value* { return Triangle(g, n, false); }},
        {"aten::pad",  // (x, pad, mode, value)
         [](Graph& g, Node* n) -> Value* {
           auto mode = ConstantOf(n->input(2));
           auto pad = ConstantIntList(n->input(1));
           if (!mode || !mode->isString() || !pad)
             return Reject("a constant mode and constant padding expected");
           if (mode->toStringRef() == "constant") {
             Value* value =
                 IsNone(n->input(3)) ? g.insertConstant(0.0) : n->input(3);
             return InsertOp(g, "aten::constant_pad_nd",
                             {n->input(0), n->input(1), value});
           }
           if (mode->toStringRef() != "reflect" &&
               mode->toStringRef() != "replicate" &&
               mode->toStringRef() != "circular")
             return Reject(
                 "mode constant, reflect, replicate or circular expected");
           return PadWithCopies(g, n->input(0), *pad, mode->toStringRef());
         }},
    };
    // upsample_nearest{1,2,3}d and _upsample_nearest_exact{1,2,3}d
    for (int64_t spatial = 1; spatial <= 3; ++spatial) {
      for (bool exact : {false, true}) {
        (*table)[std::string(exact ? "aten::_upsample_nearest_exact"
                                   : "aten::upsample_nearest") +
                 std::to_string(spatial) + "d"] = [spatial, exact](Graph& g,
                                                                   Node* n) {
          return UpsampleNearest(g, n, spatial, exact);
        };
      }
    }
    return table;
  }();
  return *rewrites;
}

}  // namespace metafuse::compiler::decompose_internal
