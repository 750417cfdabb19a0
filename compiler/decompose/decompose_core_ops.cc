// The decompositions of the core ATen operators into the primitive set
// (the table Rewrites and MultiRewrites; decompose.h lists every rewrite):
// linear algebra, convolution and pooling, elementwise activations,
// reductions and shape ops. The other families have their own files
// (decompose_losses.cc, decompose_normalization.cc, ...).
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

// movedim's dims as a permutation: the moved dims at their destinations, the
// others in their order in the free places.
c10::optional<std::vector<int64_t>> MovedimPermutation(Node* n) {
  const int64_t rank = TensorRank(n->input(0));
  auto dims = [&](Value* v) -> c10::optional<std::vector<int64_t>> {
    auto c = ConstantOf(v);
    if (!c) return c10::nullopt;
    std::vector<int64_t> d = c->isInt() ? std::vector<int64_t>{c->toInt()} : c->toIntVector();
    for (int64_t& x : d) {
      if (x < 0) x += rank;
      if (x < 0 || x >= rank) return c10::nullopt;
    }
    return d;
  };
  auto source = dims(n->input(1)), destination = dims(n->input(2));
  if (rank < 0 || !source || !destination || source->size() != destination->size())
    return c10::nullopt;
  std::vector<int64_t> order(rank, -1);
  std::vector<bool> moved(rank, false);
  for (size_t i = 0; i < source->size(); ++i) {
    if (order[(*destination)[i]] != -1 || moved[(*source)[i]]) return c10::nullopt;
    order[(*destination)[i]] = (*source)[i];
    moved[(*source)[i]] = true;
  }
  int64_t next = 0;
  for (int64_t& slot : order) {
    if (slot != -1) continue;
    while (moved[next]) ++next;
    slot = next++;
  }
  return order;
}

// ones / zeros(size, dtype, layout, device, pin_memory) with constant
// arguments: the tensor itself, a constant of the graph.
Value* ConstantFilled(Graph& g, Node* n, double value) {
  auto sizes = ConstantIntList(n->input(0));
  // Sizes read from a tensor while tracing (nn.GRU's initial state): the
  // traced output's static shape, which the program's guard fixes.
  if (!sizes) sizes = StaticSizes(n->output());
  auto dtype = ConstantOf(n->input(1));
  auto device = ConstantOf(n->input(3));
  if (!sizes || !dtype || !device || !dtype->isInt() || !device->isDevice() ||
      !(device->toDevice().is_cpu() || device->toDevice().is_cuda())) {
    return Reject("constant sizes, dtype and a CPU or CUDA device expected");
  }
  at::Tensor filled = at::full(*sizes, value,
                               at::TensorOptions()
                                   .dtype(static_cast<at::ScalarType>(dtype->toInt()))
                                   .device(device->toDevice()));
  return g.insertConstant(filled);
}

// Both tensors have a known, equal size of dim 0 (bmm does not broadcast).
bool SameLeadingSize(Value* a, Value* b) {
  auto ta = a->type()->cast<c10::TensorType>(), tb = b->type()->cast<c10::TensorType>();
  if (!ta || !tb) return false;
  auto sa = ta->sizes().concrete_sizes(), sb = tb->sizes().concrete_sizes();
  return sa && sb && !sa->empty() && !sb->empty() && sa->front() == sb->front();
}

// matmul of operands of any rank >= 1 with static shapes (torch.matmul's
// rules): a vector operand becomes a one-row (one-column) matrix; a matrix
// times a stack of matrices is one mm over the stacked rows; stacks are
// broadcast against each other (expand: its derivative sums back) and run as
// one bmm; the result is reshaped to matmul's output shape.
Value* Matmul(Graph& g, Node* n) {
  Value *a = n->input(0), *b = n->input(1);
  auto sa = StaticSizes(a), sb = StaticSizes(b), out = StaticSizes(n->output());
  Value* like = a;  // (the dtype and device of every intermediate)
  if (!sa || !sb || !out || sa->empty() || sb->empty() || !IsTensor(a))
    return Reject("operands and a result of static shape expected");
  auto typed = [&](Value* v, const std::vector<int64_t>& sizes) {
    return WithSizes(v, like, sizes);
  };
  auto reshape = [&](Value* v, const std::vector<int64_t>& sizes) {
    return typed(InsertOp(g, "aten::reshape", {v, g.insertConstant(sizes)}), sizes);
  };
  if (sa->size() == 1) {  // a row
    sa = std::vector<int64_t>{1, (*sa)[0]};
    a = reshape(a, *sa);
  }
  if (sb->size() == 1) {  // a column
    sb = std::vector<int64_t>{(*sb)[0], 1};
    b = reshape(b, *sb);
  }
  const int64_t rows = (*sa)[sa->size() - 2], inner = (*sa)[sa->size() - 1];
  const int64_t cols = (*sb)[sb->size() - 1];
  if ((*sb)[sb->size() - 2] != inner) return Reject("matching inner sizes expected");
  std::vector<int64_t> stack_a(sa->begin(), sa->end() - 2), stack_b(sb->begin(), sb->end() - 2);
  Value* product;
  if (stack_b.empty()) {  // [..., n, k] @ [k, m]: the stacked rows times one matrix
    Value* flat = reshape(a, {Count(stack_a) * rows, inner});
    product = typed(InsertOp(g, "aten::mm", {flat, b}), {Count(stack_a) * rows, cols});
  } else {
    // the broadcast stack (the longer one, sizes 1 stretched)
    std::vector<int64_t> stack(std::max(stack_a.size(), stack_b.size()), 1);
    for (const auto* s : {&stack_a, &stack_b}) {
      for (size_t i = 0; i < s->size(); ++i) {
        int64_t& slot = stack[stack.size() - s->size() + i];
        const int64_t size = (*s)[i];
        if (size != 1 && slot != 1 && size != slot) return Reject("broadcastable stacks expected");
        if (size != 1) slot = size;
      }
    }
    auto as_stack = [&](Value* v, const std::vector<int64_t>& own, int64_t r, int64_t c) {
      std::vector<int64_t> full = stack;
      full.push_back(r);
      full.push_back(c);
      if (own != stack) v = typed(InsertOp(g, "aten::expand", {v, g.insertConstant(full)}), full);
      return reshape(v, {Count(stack), r, c});
    };
    product = typed(InsertOp(g, "aten::bmm", {as_stack(a, stack_a, rows, inner),
                                               as_stack(b, stack_b, inner, cols)}),
                    {Count(stack), rows, cols});
  }
  return InsertOp(g, "aten::reshape", {product, g.insertConstant(*out)});
}

// conv2d / conv_transpose2d from the generic convolution signature
// (input, weight, bias, stride, padding, dilation, transposed,
// output_padding, groups, ...): 2-D, batched (NCHW) only.
// conv1d as conv2d over a height-1 image: x [N, C, L] -> [N, C, 1, L],
// w [O, C/g, k] -> [O, C/g, 1, k], parameters (1, s), (0, p), (1, d).
Value* Conv1dAs2d(Graph& g, Value* x, Value* w, Value* b, Value* stride,
                  Value* padding, Value* dilation, Value* groups) {
  auto s = ConstantIntList(stride), p = ConstantIntList(padding), d = ConstantIntList(dilation);
  if (TensorRank(x) != 3 || !s || !p || !d || s->size() != 1 ||
      p->size() != 1 || d->size() != 1) {
    return Reject(
        "a batched [N, C, L] input and constant one-element "
        "stride/padding/dilation "
        "expected");
  }
  Value* x2 = InsertOp(g, "aten::unsqueeze", {x, g.insertConstant(2)});
  Value* w2 = InsertOp(g, "aten::unsqueeze", {w, g.insertConstant(2)});
  Value* y =
      InsertOp(g, "aten::conv2d",
             {x2, w2, b, g.insertConstant(std::vector<int64_t>{1, (*s)[0]}),
              g.insertConstant(std::vector<int64_t>{0, (*p)[0]}),
              g.insertConstant(std::vector<int64_t>{1, (*d)[0]}), groups});
  return InsertOp(g, "aten::squeeze", {y, g.insertConstant(2)});
}

// conv2d on an unbatched [C, H, W] input: a batch of one.
Value* Conv2dMaybeUnbatched(Graph& g, Value* x, Value* w, Value* b,
                            Value* stride, Value* padding, Value* dilation,
                            Value* groups) {
  const int64_t rank = TensorRank(x);
  if (rank != 3 && rank != 4)
    return Reject("a [C, H, W] or [N, C, H, W] input expected");
  if (rank == 3) x = InsertOp(g, "aten::unsqueeze", {x, g.insertConstant(0)});
  Value* y =
      InsertOp(g, "aten::conv2d", {x, w, b, stride, padding, dilation, groups});
  return rank == 3 ? InsertOp(g, "aten::squeeze", {y, g.insertConstant(0)}) : y;
}

// conv2d / conv_transpose2d / conv1d from the generic convolution signature
// (input, weight, bias, stride, padding, dilation, transposed,
// output_padding, groups, ...): batched 2-D (NCHW) and batched 1-D (NCL,
// not transposed).
Value* Convolution(Graph& g, Node* n) {
  auto transposed = ConstantOf(n->input(6));
  auto output_padding = ConstantIntList(n->input(7));
  const int64_t rank = TensorRank(n->input(0));
  if (!transposed || !output_padding) {
    return Reject("constant `transposed` and `output_padding` expected");
  }
  Value *x = n->input(0), *w = n->input(1), *b = n->input(2);
  if (rank == 3 && !transposed->toBool()) {
    return Conv1dAs2d(g, x, w, b, n->input(3), n->input(4), n->input(5),
                      n->input(8));
  }
  if (rank != 4) {
    return Reject(
        "a batched 2-D [N, C, H, W] (or non-transposed 1-D [N, C, L]) input "
        "expected");
  }
  if (!transposed->toBool()) {
    return InsertOp(
        g, "aten::conv2d",
        {x, w, b, n->input(3), n->input(4), n->input(5), n->input(8)});
  }
  return InsertOp(g, "aten::conv_transpose2d",
                {x, w, b, n->input(3), n->input(4), n->input(7), n->input(8),
                 n->input(5)});
}


// max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) -> values of
// max_pool2d_with_indices (whose indices the derivative rule scatters to).
Value* MaxPool2d(Graph& g, Node* n) {
  const int64_t rank = TensorRank(n->input(0));
  if (rank != 3 && rank != 4)
    return Reject("a [C, H, W] or [N, C, H, W] input expected");
  std::vector<Value*> inputs(n->inputs().begin(), n->inputs().end());
  Node* pool = g.create(Symbol::fromQualString("aten::max_pool2d_with_indices"),
                        inputs, 2);
  g.insertNode(pool);
  pool->output(0)->setType(n->output()->type());
  pool->output(1)->setType(c10::TensorType::get()->withScalarType(at::kLong));
  if (pool->maybeSchema() == nullptr) {
    pool->destroy();
    return nullptr;
  }
  return pool->output(0);
}

// max.dim / min.dim (self, dim, keepdim) -> (values, indices): the index
// from argmax/argmin (first occurrence, as max.dim) and the values gathered
// there, so the gradient reaches that one element as eager's does.
std::vector<Value*> SelectAlongDim(Graph& g, Node* n, const char* arg_op) {
  if (n->inputs().size() != 3 || n->outputs().size() != 2) return {};
  auto dim = ConstantOf(n->input(1)), keepdim = ConstantOf(n->input(2));
  if (!dim || !keepdim || !dim->isInt()) return {};
  Value* index =
      InsertOp(g, arg_op, {n->input(0), n->input(1), g.insertConstant(true)});
  Value* values = InsertOp(g, "aten::gather", {n->input(0), n->input(1), index});
  if (!keepdim->toBool()) {
    values = InsertOp(g, "aten::squeeze", {values, n->input(1)});
    index = InsertOp(g, "aten::squeeze", {index, n->input(1)});
  }
  return {values, index};
}

const MultiRewriteTable& MultiRewrites() {
  static const auto* rewrites =
      new MultiRewriteTable{
          {"aten::max",
           [](Graph& g, Node* n) {
             return SelectAlongDim(g, n, "aten::argmax");
           }},
          {"aten::min",
           [](Graph& g, Node* n) {
             return SelectAlongDim(g, n, "aten::argmin");
           }},
      };
  return *rewrites;
}

// avg_pool2d as a depthwise conv2d with a constant 1/divisor kernel (groups
// = channels), where every window has the same divisor: count_include_pad
// or no padding, and ceil_mode only where it adds no window.
Value* AvgPool2d(Graph& g, Value* x, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, std::vector<int64_t> padding,
                 bool ceil_mode, bool count_include_pad,
                 c10::optional<int64_t> divisor_override) {
  auto type = x->type()->cast<c10::TensorType>();
  auto sizes = type ? type->sizes().concrete_sizes() : c10::nullopt;
  if (!sizes || sizes->size() != 4 || !type->scalarType()) {
    return Reject("a [N, C, H, W] input of static shape expected");
  }
  auto widen = [](std::vector<int64_t>& v, int64_t fallback) {
    if (v.empty()) v = {fallback, fallback};
    if (v.size() == 1) v.push_back(v[0]);
    return v.size() == 2;
  };
  if (!widen(kernel, 1))
    return Reject("a 1- or 2-element kernel_size expected");
  if (stride.empty()) stride = kernel;
  if (!widen(stride, 1) || !widen(padding, 0))
    return Reject("2-D stride/padding expected");
  for (size_t i = 0; i < 2; ++i) {
    const int64_t span = (*sizes)[2 + i] + 2 * padding[i] - kernel[i];
    if (span < 0)
      return Reject("a kernel no larger than the padded input expected");
    if (ceil_mode && span % stride[i] != 0) {
      return Reject(
          "ceil_mode adds a partial window (its divisor differs): not "
          "compiled");
    }
    if (!count_include_pad && padding[i] != 0 && !divisor_override) {
      return Reject(
          "count_include_pad=False with padding (per-window divisors): not "
          "compiled");
    }
  }
  const int64_t channels = (*sizes)[1];
  const double divisor = divisor_override
                             ? static_cast<double>(*divisor_override)
                             : static_cast<double>(kernel[0] * kernel[1]);
  at::Tensor ones =
      torch::full({channels, 1, kernel[0], kernel[1]}, 1.0 / divisor,
                  at::TensorOptions().dtype(*type->scalarType()));
  return InsertOp(g, "aten::conv2d",
                {x, g.insertConstant(ones), g.insertConstant(c10::IValue()),
                 g.insertConstant(stride), g.insertConstant(padding),
                 g.insertConstant(std::vector<int64_t>{1, 1}),
                 g.insertConstant(channels)});
}

// maximum / minimum with eager's tie rule (each operand gets half).
Value* Extremum(Graph& g, Value* a, Value* b, bool max) {
  Value* mid = InsertOp(g, "aten::mul",
                      {InsertOp(g, "aten::add", {a, b}), g.insertConstant(0.5)});
  Value* inner = Select(g, max ? "aten::lt" : "aten::gt", a, b, b, mid);
  return Select(g, max ? "aten::gt" : "aten::lt", a, b, a, inner);
}

// hardtanh: lo below lo, hi above hi, with a zero gradient at the bounds
// (eager's).
Value* Hardtanh(Graph& g, Value* x, double lo, double hi) {
  Value* upper = Select(g, "aten::ge", x, Filled(g, x, hi), Filled(g, x, hi), x);
  return Select(g, "aten::le", x, Filled(g, x, lo), Filled(g, x, lo), upper);
}

// clamp to the given bounds, gradient 1 at the bounds (eager's).
Value* Clamp(Graph& g, Value* x, std::optional<double> lo, std::optional<double> hi) {
  Value* out = x;
  if (hi) out = Select(g, "aten::gt", out, Filled(g, out, *hi), Filled(g, out, *hi), out);
  if (lo) out = Select(g, "aten::lt", x, Filled(g, out, *lo), Filled(g, out, *lo), out);
  return out;
}

// elu: x scale for x > 0, else alpha scale (exp(x input_scale) - 1); the
// exponential only sees min(x, 0), so it stays finite.
Value* Elu(Graph& g, Value* x, double alpha, double scale, double input_scale) {
  Value* zero = Filled(g, x, 0.0);
  Value* negative_part = Select(g, "aten::gt", x, zero, zero, x);
  Value* e = InsertOp(
      g, "aten::exp",
      {InsertOp(g, "aten::mul", {negative_part, g.insertConstant(input_scale)})});
  Value* neg_branch =
      InsertOp(g, "aten::mul",
             {InsertOp(g, "aten::sub", {e, g.insertConstant(1.0)}),
              g.insertConstant(alpha * scale)});
  return Select(g, "aten::gt", x, zero,
                InsertOp(g, "aten::mul", {x, g.insertConstant(scale)}),
                neg_branch);
}

const RewriteTable& Rewrites() {
  static const auto* rewrites = new RewriteTable{
      {"aten::linear",  // N-D x: flattened to 2-D around the mm
       [](Graph& g, Node* n) -> Value* {
         const int64_t rank = TensorRank(n->input(0));
         auto out_type = n->output()->type()->cast<c10::TensorType>();
         auto out_sizes =
             out_type ? out_type->sizes().concrete_sizes() : c10::nullopt;
         if (rank < 2 || TensorRank(n->input(1)) != 2 ||
             (rank > 2 && !out_sizes)) {
           return Reject(
               "an input of rank >= 2 (static shape when > 2) and a 2-D weight "
               "expected");
         }
         Value* x = n->input(0);
         if (rank > 2) {
           x = InsertOp(g, "aten::flatten",
                      {x, g.insertConstant(0), g.insertConstant(rank - 2)});
         }
         Value* out =
             InsertOp(g, "aten::mm", {x, InsertOp(g, "aten::t", {n->input(1)})});
         if (rank > 2)
           out =
               InsertOp(g, "aten::reshape", {out, g.insertConstant(*out_sizes)});
         if (n->input(2)->type()->kind() != c10::TypeKind::NoneType) {
           out = InsertOp(g, "aten::add", {out, n->input(2)});
         }
         return out;
       }},
      {"aten::matmul",
       [](Graph& g, Node* n) -> Value* {
         const int64_t a = TensorRank(n->input(0)), b = TensorRank(n->input(1));
         if (a == 2 && b == 2) return InsertOp(g, "aten::mm", {n->input(0), n->input(1)});
         if (a == 3 && b == 3 && SameLeadingSize(n->input(0), n->input(1))) {
           return InsertOp(g, "aten::bmm", {n->input(0), n->input(1)});
         }
         return Matmul(g, n);
       }},
      {"aten::einsum", Einsum},
      {"aten::addmm",
       [](Graph& g, Node* n) -> Value* {
         auto beta = ConstantOf(n->input(3)), alpha = ConstantOf(n->input(4));
         if (!beta || !alpha || beta->toScalar().toDouble() != 1.0 ||
             alpha->toScalar().toDouble() != 1.0) {
           return nullptr;
         }
         return InsertOp(
             g, "aten::add",
             {InsertOp(g, "aten::mm", {n->input(1), n->input(2)}), n->input(0)});
       }},
      {"aten::square",
       [](Graph& g, Node* n) -> Value* {
         return InsertOp(g, "aten::mul", {n->input(0), n->input(0)});
       }},
      {"aten::log_softmax",
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1));
         if (!dim || (n->inputs().size() > 2 && !IsNone(n->input(2)) &&
                      !IsInputDtype(n->input(2), n->input(0)))) {
           return Reject("a constant dim and no dtype conversion expected");
         }
         return LogSoftmax(g, n->input(0), dim->toInt());
       }},
      {"aten::_log_softmax",  // (x, dim, half_to_float): torch 2.x's traces under vmap
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1)), half = ConstantOf(n->input(2));
         if (!dim || !half || half->toBool()) {
           return Reject("a constant dim and no half-to-float conversion expected");
         }
         return LogSoftmax(g, n->input(0), dim->toInt());
       }},
      {"aten::scalar_tensor",  // (s, dtype, layout, device, pin_memory): a constant
       [](Graph& g, Node* n) -> Value* {
         auto s = ConstantOf(n->input(0));
         auto type = n->output()->type()->cast<c10::TensorType>();
         if (!s || !type || !type->scalarType()) {
           return Reject("a constant value and a known dtype expected");
         }
         return g.insertConstant(at::scalar_tensor(
             s->toScalar(), at::TensorOptions()
                                .dtype(*type->scalarType())
                                .device(type->device().value_or(at::kCPU))));
       }},
      {"aten::_to_copy",  // (x, dtype, layout, device, pin_memory, non_blocking,
                          // memory_format): a dtype conversion on one device
       [](Graph& g, Node* n) -> Value* {
         auto in = n->input(0)->type()->cast<c10::TensorType>();
         auto out = n->output()->type()->cast<c10::TensorType>();
         if (!in || !out || !in->scalarType() || !out->scalarType() || !in->device() ||
             in->device() != out->device()) {
           return Reject("a conversion of known dtypes on one device expected");
         }
         if (in->scalarType() == out->scalarType()) return n->input(0);
         at::Tensor like = at::empty(
             {}, at::TensorOptions().dtype(*out->scalarType()).device(*out->device()));
         return InsertOp(g, "aten::type_as", {n->input(0), g.insertConstant(like)});
       }},
      {"aten::view",  // a reshape: the program's buffers need not have the
                      // strides eager's had (torch 2.x's vmap traces convolutions
                      // with views of transposed tensors)
       [](Graph& g, Node* n) -> Value* {
         if (n->input(1)->type()->kind() != c10::TypeKind::ListType) {
           return Reject("a view to sizes expected (not to a dtype)");
         }
         return InsertOp(g, "aten::reshape", {n->input(0), n->input(1)});
       }},
      {"aten::unflatten",  // (x, dim, sizes): a reshape to its static result
       [](Graph& g, Node* n) -> Value* {
         auto sizes = StaticSizes(n->output());
         if (!sizes) return Reject("a result of static shape expected");
         return InsertOp(g, "aten::reshape", {n->input(0), g.insertConstant(*sizes)});
       }},
      {"aten::select",  // (x, dim, index): a one-wide crop, the dim dropped
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1)), index = ConstantOf(n->input(2));
         if (!dim || !index || !dim->isInt() || !index->isInt())
           return Reject("a constant dim and index expected");
         const int64_t i = index->toInt();
         Value* crop = Crop(g, n->input(0), dim->toInt(), i, i == -1 ? INT64_MAX : i + 1);
         if (crop == nullptr) return nullptr;
         return InsertOp(g, "aten::squeeze", {crop, n->input(1)});
       }},
      {"aten::slice",  // (x, dim, start, end, step): step 1 only
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1)), step = ConstantOf(n->input(4));
         auto start = ConstantOf(n->input(2)), end = ConstantOf(n->input(3));
         if (!dim || !step || !start || !end || !dim->isInt() || !step->isInt() ||
             step->toInt() != 1) {
           return Reject("constant dim, bounds and step 1 expected");
         }
         return Crop(g, n->input(0), dim->toInt(), start->isNone() ? 0 : start->toInt(),
                     end->isNone() ? INT64_MAX : end->toInt());
       }},
      {"aten::movedim",  // (x, source, destination), ints or int lists
       [](Graph& g, Node* n) -> Value* {
         auto order = MovedimPermutation(n);
         if (!order) return Reject("constant dims and an input of known rank expected");
         return InsertOp(g, "aten::permute", {n->input(0), g.insertConstant(*order)});
       }},
      {"aten::ones",  // (size, dtype, layout, device, pin_memory), all constant
       [](Graph& g, Node* n) -> Value* { return ConstantFilled(g, n, 1.0); }},
      {"aten::zeros",
       [](Graph& g, Node* n) -> Value* { return ConstantFilled(g, n, 0.0); }},
      {"aten::softmax",
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1));
         if (!dim || (n->inputs().size() > 2 &&
                      n->input(2)->type()->kind() != c10::TypeKind::NoneType)) {
           return nullptr;
         }
         return InsertOp(g, "aten::exp",
                       {LogSoftmax(g, n->input(0), dim->toInt())});
       }},
      {"aten::_convolution",
       [](Graph& g, Node* n) -> Value* { return Convolution(g, n); }},
      {"aten::convolution",
       [](Graph& g, Node* n) -> Value* { return Convolution(g, n); }},
      {"aten::conv2d",  // padding="valid"/"same", or an unbatched input
       [](Graph& g, Node* n) -> Value* {
         Value* padding = n->input(4);
         if (auto mode = ConstantOf(n->input(4)); mode && mode->isString()) {
           auto stride = ConstantIntList(n->input(3)), dilation = ConstantIntList(n->input(5));
           auto weight = n->input(1)->type()->cast<c10::TensorType>();
           if (!stride || !dilation || !weight) return nullptr;
           std::vector<int64_t> pads = {0, 0};
           if (mode->toStringRef() == "same") {
             auto sizes = weight->sizes().concrete_sizes();
             if (!sizes || sizes->size() != 4) return nullptr;
             for (size_t i = 0; i < 2; ++i) {
               const int64_t s = (*stride)[stride->size() == 1 ? 0 : i];
               const int64_t d = (*dilation)[dilation->size() == 1 ? 0 : i];
               const int64_t total = d * ((*sizes)[2 + i] - 1);
               if (s != 1 || total % 2 != 0) {
                 return Reject(
                     "padding='same' needs stride 1 and symmetric padding");
               }
               pads[i] = total / 2;
             }
           } else if (mode->toStringRef() != "valid") {
             return nullptr;
           }
           padding = g.insertConstant(pads);
         }
         return Conv2dMaybeUnbatched(g, n->input(0), n->input(1), n->input(2),
                                     n->input(3), padding, n->input(5),
                                     n->input(6));
       }},
      {"aten::conv1d",  // int-list padding, batched NCL
       [](Graph& g, Node* n) -> Value* {
         return Conv1dAs2d(g, n->input(0), n->input(1), n->input(2),
                           n->input(3), n->input(4), n->input(5), n->input(6));
       }},
      {"aten::cat",
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1));
         if (!dim) return nullptr;
         return Concatenate(g, ListElements(n->input(0)), dim->toInt());
       }},
      {"aten::stack",  // cat of the pieces unsqueezed at dim
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1));
         std::vector<Value*> pieces = ListElements(n->input(0));
         if (!dim || pieces.empty()) return nullptr;
         const int64_t rank = TensorRank(pieces[0]);
         if (rank < 0) return nullptr;
         int64_t d = dim->toInt();
         if (d < 0) d += rank + 1;
         for (Value*& piece : pieces) {
           auto type = piece->type()->cast<c10::TensorType>();
           auto sizes = type ? type->sizes().concrete_sizes() : c10::nullopt;
           if (!sizes || d < 0 || d > rank) return nullptr;
           std::vector<int64_t> shape = *sizes;
           shape.insert(shape.begin() + d, 1);
           Value* original = piece;
           piece =
               InsertOp(g, "aten::unsqueeze", {original, g.insertConstant(d)});
           piece->setType(type->withSizes(shape));
         }
         return Concatenate(g, pieces, d);
       }},
      {"aten::avg_pool2d",
       [](Graph& g, Node* n) -> Value* {
         auto kernel = ConstantIntList(n->input(1)), stride = ConstantIntList(n->input(2)),
              padding = ConstantIntList(n->input(3));
         auto ceil_mode = ConstantOf(n->input(4)),
              include_pad = ConstantOf(n->input(5)),
              divisor = ConstantOf(n->input(6));
         if (!kernel || !stride || !padding || !ceil_mode || !include_pad ||
             !divisor) {
           return Reject("constant pooling parameters expected");
         }
         c10::optional<int64_t> override_value;
         if (!divisor->isNone()) override_value = divisor->toInt();
         return AvgPool2d(g, n->input(0), *kernel, *stride, *padding,
                          ceil_mode->toBool(), include_pad->toBool(),
                          override_value);
       }},
      {"aten::adaptive_avg_pool2d",  // windows that tile the input evenly
       [](Graph& g, Node* n) -> Value* {
         auto output = ConstantIntList(n->input(1));
         auto type = n->input(0)->type()->cast<c10::TensorType>();
         auto sizes = type ? type->sizes().concrete_sizes() : c10::nullopt;
         if (!output || output->size() != 2 || !sizes || sizes->size() != 4) {
           return Reject(
               "a constant output_size and a [N, C, H, W] input of static "
               "shape expected");
         }
         if ((*output)[0] == 1 && (*output)[1] == 1) {
           return InsertOp(
               g, "aten::mean",
               {n->input(0), g.insertConstant(std::vector<int64_t>{2, 3}),
                g.insertConstant(true)});
         }
         std::vector<int64_t> kernel(2);
         for (size_t i = 0; i < 2; ++i) {
           if ((*output)[i] <= 0 || (*sizes)[2 + i] % (*output)[i] != 0) {
             return Reject(
                 "output_size must divide the input size (uneven windows: not "
                 "compiled)");
           }
           kernel[i] = (*sizes)[2 + i] / (*output)[i];
         }
         return AvgPool2d(g, n->input(0), kernel, kernel, {0, 0}, false, true,
                          c10::nullopt);
       }},
      {"aten::leaky_relu",  // the slope at 0, as eager
       [](Graph& g, Node* n) -> Value* {
         auto slope = ConstantNumber(n->input(1));
         if (!slope) return Reject("a constant negative_slope expected");
         Value* x = n->input(0);
         return Select(g, "aten::gt", x, Filled(g, x, 0.0), x,
                       InsertOp(g, "aten::mul", {x, g.insertConstant(*slope)}));
       }},
      {"aten::elu",
       [](Graph& g, Node* n) -> Value* {
         auto alpha = ConstantNumber(n->input(1)), scale = ConstantNumber(n->input(2)),
              input_scale = ConstantNumber(n->input(3));
         if (!alpha || !scale || !input_scale)
           return Reject("constant alpha/scale expected");
         return Elu(g, n->input(0), *alpha, *scale, *input_scale);
       }},
      {"aten::selu",
       [](Graph& g, Node* n) -> Value* {
         return Elu(g, n->input(0), 1.6732632423543772848170429916717,
                    1.0507009873554804934193349852946, 1.0);
       }},
      {"aten::silu",
       [](Graph& g, Node* n) -> Value* {
         return InsertOp(
             g, "aten::mul",
             {n->input(0), InsertOp(g, "aten::sigmoid", {n->input(0)})});
       }},
      {"aten::mish",  // x tanh(softplus(x))
       [](Graph& g, Node* n) -> Value* {
         const int64_t rank = TensorRank(n->input(0));
         if (rank < 0) return Reject("an input of known rank expected");
         Value* soft = Softplus(g, n->input(0), rank);
         return InsertOp(g, "aten::mul",
                       {n->input(0), InsertOp(g, "aten::tanh", {soft})});
       }},
      {"aten::gelu",
       [](Graph& g, Node* n) -> Value* {
         auto approximate = ConstantOf(n->input(1));
         if (!approximate || !approximate->isString())
           return Reject("a constant `approximate`");
         Value* x = n->input(0);
         Value* inner;
         if (approximate->toStringRef() == "none") {  // 1 + erf(x / sqrt 2)
           inner = InsertOp(
               g, "aten::erf",
               {InsertOp(g, "aten::mul", {x, g.insertConstant(M_SQRT1_2)})});
         } else if (approximate->toStringRef() == "tanh") {
           // 1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))
           Value* cube =
               InsertOp(g, "aten::mul", {InsertOp(g, "aten::mul", {x, x}), x});
           Value* arg = InsertOp(
               g, "aten::add",
               {x, InsertOp(g, "aten::mul", {cube, g.insertConstant(0.044715)})});
           inner = InsertOp(
               g, "aten::tanh",
               {InsertOp(g, "aten::mul",
                       {arg, g.insertConstant(M_2_SQRTPI * M_SQRT1_2)})});
         } else {
           return Reject("approximate='none' or 'tanh' expected");
         }
         Value* half_x = InsertOp(g, "aten::mul", {x, g.insertConstant(0.5)});
         return InsertOp(
             g, "aten::mul",
             {half_x, InsertOp(g, "aten::add", {inner, g.insertConstant(1.0)})});
       }},
      {"aten::hardtanh",  // zero gradient at the bounds, as eager
       [](Graph& g, Node* n) -> Value* {
         auto lo = ConstantNumber(n->input(1)), hi = ConstantNumber(n->input(2));
         if (!lo || !hi) return Reject("constant min_val/max_val expected");
         return Hardtanh(g, n->input(0), *lo, *hi);
       }},
      {"aten::reciprocal",
       [](Graph& g, Node* n) -> Value* {
         return InsertOp(g, "aten::div", {InsertOp(g, "aten::ones_like", {n->input(0)}), n->input(0)});
       }},
      {"aten::log2",
       [](Graph& g, Node* n) -> Value* {
         return InsertOp(g, "aten::div", {InsertOp(g, "aten::log", {n->input(0)}), g.insertConstant(M_LN2)});
       }},
      {"aten::log10",
       [](Graph& g, Node* n) -> Value* {
         return InsertOp(g, "aten::div", {InsertOp(g, "aten::log", {n->input(0)}), g.insertConstant(M_LN10)});
       }},
      {"aten::lerp",  // (a, b, weight scalar): a + w (b - a)
       [](Graph& g, Node* n) -> Value* {
         auto weight = ConstantNumber(n->input(2));
         if (!weight) return Reject("a constant scalar weight expected");
         Value* step = InsertOp(g, "aten::sub", {n->input(1), n->input(0)});
         return InsertOp(g, "aten::add", {n->input(0), InsertOp(g, "aten::mul", {step, g.insertConstant(*weight)})});
       }},
      {"aten::hardswish",
       // x * where(x < -3, 0, where(x <= 3, x + 3, 6)) / 6: eager's value,
       // and its derivative's branches on x itself (clamp(x + 3, 0, 6) would
       // branch on the rounded x + 3: 1.5 instead of 1 just above 3)
       [](Graph& g, Node* n) -> Value* {
         Value* x = n->input(0);
         Value* shifted = InsertOp(g, "aten::add", {x, g.insertConstant(3.0)});
         Value* capped = Select(g, "aten::le", x, Filled(g, x, 3.0), shifted, Filled(g, x, 6.0));
         Value* gate = Select(g, "aten::lt", x, Filled(g, x, -3.0), Filled(g, x, 0.0), capped);
         return InsertOp(g, "aten::div",
                         {InsertOp(g, "aten::mul", {x, gate}), g.insertConstant(6.0)});
       }},
      {"aten::relu6",  // hardtanh(x, 0, 6), as eager's
       [](Graph& g, Node* n) -> Value* { return Hardtanh(g, n->input(0), 0.0, 6.0); }},
      {"aten::clamp",  // gradient 1 at the bounds, as eager
       [](Graph& g, Node* n) -> Value* {
         const bool lo_tensor = IsTensor(n->input(1)), hi_tensor = IsTensor(n->input(2));
         if (lo_tensor || hi_tensor) {  // one tensor bound: where's, with its gradient
           if (!IsNone(n->input(lo_tensor ? 2 : 1)))
             return Reject("scalar bounds, or one tensor bound, expected");
           Value *x = n->input(0), *bound = n->input(lo_tensor ? 1 : 2);
           return Select(g, lo_tensor ? "aten::lt" : "aten::gt", x, bound, bound, x);
         }
         std::optional<double> lo, hi;
         if (!IsNone(n->input(1)) && !(lo = ConstantNumber(n->input(1))))
           return Reject("constant bounds expected");
         if (!IsNone(n->input(2)) && !(hi = ConstantNumber(n->input(2))))
           return Reject("constant bounds expected");
         return Clamp(g, n->input(0), lo, hi);
       }},
      {"aten::clamp_min",
       [](Graph& g, Node* n) -> Value* {
         auto lo = ConstantNumber(n->input(1));
         if (!lo) return Reject("a constant scalar bound expected");
         return Clamp(g, n->input(0), lo, std::nullopt);
       }},
      {"aten::clamp_max",
       [](Graph& g, Node* n) -> Value* {
         auto hi = ConstantNumber(n->input(1));
         if (!hi) return Reject("a constant scalar bound expected");
         return Clamp(g, n->input(0), std::nullopt, hi);
       }},
      {"aten::amin",  // (x, dim, keepdim) = -amax(-x): ties shared as eager
       [](Graph& g, Node* n) -> Value* {
         return InsertOp(g, "aten::neg",
                         {InsertOp(g, "aten::amax",
                                   {WithTypeOf(InsertOp(g, "aten::neg", {n->input(0)}), n->input(0)),
                                    n->input(1), n->input(2)})});
       }},
      {"aten::expand_as",
       [](Graph& g, Node* n) -> Value* {
         auto sizes = StaticSizes(n->input(1));
         if (!sizes) return Reject("an `other` of static shape expected");
         return InsertOp(g, "aten::expand", {n->input(0), g.insertConstant(*sizes)});
       }},
      {"aten::sign",  // 1, -1, or x * 0 (0, or NaN for NaN); no gradient, as eager
       [](Graph& g, Node* n) -> Value* {
         Value* x = n->input(0);
         Value* zero = Filled(g, x, 0.0);
         Value* rest = InsertOp(g, "aten::mul", {x, g.insertConstant(0.0)});
         Value* negative = Select(g, "aten::lt", x, zero, Filled(g, x, -1.0), rest);
         return Select(g, "aten::gt", x, zero, Filled(g, x, 1.0), negative);
       }},
      {"aten::to",  // a conversion to the dtype and device it has: the tensor itself
       [](Graph& g, Node* n) -> Value* {
         auto in = n->input(0)->type()->cast<c10::TensorType>();
         auto out = n->output()->type()->cast<c10::TensorType>();
         if (!in || !out || !in->scalarType() || in->scalarType() != out->scalarType() ||
             !in->device() || in->device() != out->device()) {
           return Reject("a conversion to the same dtype and device expected");
         }
         return n->input(0);
       }},
      {"aten::cumsum",
       // (x, dim, dtype): along the last dim, a product with the constant
       // upper-triangular ones (column j sums the first j + 1 entries)
       [](Graph& g, Node* n) -> Value* {
         auto sizes = StaticSizes(n->input(0));
         auto dim = ConstantOf(n->input(1));
         auto type = n->input(0)->type()->cast<c10::TensorType>();
         if (!sizes || sizes->empty() || !dim || !dim->isInt() || !type || !type->scalarType() ||
             !c10::isFloatingType(*type->scalarType()) ||
             !(IsNone(n->input(2)) || IsInputDtype(n->input(2), n->input(0)))) {
           return Reject("a floating input of static shape, a constant dim and no dtype "
                         "conversion expected");
         }
         const int64_t rank = static_cast<int64_t>(sizes->size());
         const int64_t d = dim->toInt() < 0 ? dim->toInt() + rank : dim->toInt();
         if (d < 0 || d >= rank) return Reject("dim out of range");
         std::vector<int64_t> order(rank), moved_sizes(rank);
         for (int64_t i = 0; i < rank; ++i) order[i] = i;
         std::swap(order[d], order[rank - 1]);  // its own inverse
         for (int64_t i = 0; i < rank; ++i) moved_sizes[i] = (*sizes)[order[i]];
         const int64_t length = (*sizes)[d], rows = length == 0 ? 0 : Count(*sizes) / length;
         Value* moved = WithTypeOf(InsertOp(g, "aten::permute", {n->input(0), g.insertConstant(order)}),
                                   n->input(0));
         moved->setType(type->withSizes(moved_sizes));
         Value* flat = InsertOp(g, "aten::reshape",
                                {moved, g.insertConstant(std::vector<int64_t>{rows, length})});
         flat->setType(type->withSizes({rows, length}));
         at::Tensor upper = torch::ones({length, length}, at::TensorOptions().dtype(*type->scalarType()))
                                .triu();
         Value* summed = InsertOp(g, "aten::mm", {flat, g.insertConstant(upper)});
         summed->setType(type->withSizes({rows, length}));
         Value* back = InsertOp(g, "aten::reshape", {summed, g.insertConstant(moved_sizes)});
         back->setType(type->withSizes(moved_sizes));
         if (d == rank - 1) return back;  // (no dims were moved)
         // contiguous, as eager's result (a later view may need it)
         Value* restored = InsertOp(g, "aten::permute", {back, g.insertConstant(order)});
         restored->setType(type->withSizes(*sizes));
         return InsertOp(g, "aten::contiguous", {restored});
       }},
      {"aten::numpy_T",  // x.T: the dims reversed
       [](Graph& g, Node* n) -> Value* {
         const int64_t rank = TensorRank(n->input(0));
         if (rank < 0) return Reject("an input of known rank expected");
         std::vector<int64_t> order;
         for (int64_t d = rank - 1; d >= 0; --d) order.push_back(d);
         return InsertOp(g, "aten::permute", {n->input(0), g.insertConstant(order)});
       }},
      {"aten::embedding",
       // (weight, indices, padding_idx, scale_grad_by_freq, sparse): rows of
       // weight gathered at the flattened indices (its gradient scatter-adds,
       // as eager's dense backward)
       [](Graph& g, Node* n) -> Value* {
         auto padding = ConstantOf(n->input(2)), scale = ConstantOf(n->input(3));
         auto weight = StaticSizes(n->input(0)), indices = StaticSizes(n->input(1));
         if (!padding || !padding->isInt() || padding->toInt() != -1 || !scale ||
             scale->toBool()) {
           return Reject("no padding_idx and no scale_grad_by_freq expected");
         }
         if (!weight || weight->size() != 2 || !indices)
           return Reject("a 2-D weight and indices of static shape expected");
         const int64_t count = Count(*indices);
         Value* flat = InsertOp(g, "aten::reshape",
                                {n->input(1), g.insertConstant(std::vector<int64_t>{count, 1})});
         Value* index = InsertOp(g, "aten::expand",
                                 {flat, g.insertConstant(std::vector<int64_t>{count, (*weight)[1]})});
         Value* rows = InsertOp(g, "aten::gather", {n->input(0), g.insertConstant(0), index});
         std::vector<int64_t> shape = *indices;
         shape.push_back((*weight)[1]);
         return InsertOp(g, "aten::reshape", {rows, g.insertConstant(shape)});
       }},
      {"aten::maximum",
       [](Graph& g, Node* n) -> Value* {
         return Extremum(g, n->input(0), n->input(1), true);
       }},
      {"aten::minimum",
       [](Graph& g, Node* n) -> Value* {
         return Extremum(g, n->input(0), n->input(1), false);
       }},
      {"aten::max_pool2d",
       [](Graph& g, Node* n) -> Value* { return MaxPool2d(g, n); }},
      {"aten::softplus",  // (x, beta, threshold): x where beta x > threshold
       [](Graph& g, Node* n) -> Value* {
         auto beta = ConstantOf(n->input(1)),
              threshold = ConstantOf(n->input(2));
         const int64_t rank = TensorRank(n->input(0));
         if (!beta || !threshold || rank < 0) {
           return Reject(
               "constant beta/threshold and an input of known rank expected");
         }
         const double b = beta->toScalar().toDouble();
         if (b <= 0.0) return Reject("beta > 0 expected");
         Value* x = n->input(0);
         Value* bx =
             b == 1.0 ? x : InsertOp(g, "aten::mul", {x, g.insertConstant(b)});
         Value* soft = Softplus(g, bx, rank);
         if (b != 1.0)
           soft = InsertOp(g, "aten::div", {soft, g.insertConstant(b)});
         Value* linear =
             InsertOp(g, "aten::gt",
                    {bx, g.insertConstant(threshold->toScalar().toDouble())});
         return InsertOp(g, "aten::where", {linear, x, soft});
       }},
      {"aten::log_sigmoid",  // -softplus(-x)
       [](Graph& g, Node* n) -> Value* {
         const int64_t rank = TensorRank(n->input(0));
         if (rank < 0) return nullptr;
         Value* neg = InsertOp(g, "aten::neg", {n->input(0)});
         return InsertOp(g, "aten::neg", {Softplus(g, neg, rank)});
       }},
      {"aten::max",  // max(x): every element; max(a, b): maximum
       [](Graph& g, Node* n) -> Value* {
         if (n->inputs().size() == 2 &&
             n->input(1)->type()->kind() == c10::TypeKind::TensorType) {
           return Extremum(g, n->input(0), n->input(1), true);
         }
         if (n->inputs().size() != 1) return nullptr;
         return InsertOp(g, "aten::amax",
                       {n->input(0), g.insertConstant(std::vector<int64_t>{}),
                        g.insertConstant(false)});
       }},
      {"aten::min",  // min(x) = -amax(-x): every element, ties shared as eager
       [](Graph& g, Node* n) -> Value* {
         if (n->inputs().size() == 2 &&
             n->input(1)->type()->kind() == c10::TypeKind::TensorType) {
           return Extremum(g, n->input(0), n->input(1), false);
         }
         if (n->inputs().size() != 1) return nullptr;
         Value* negated = InsertOp(g, "aten::neg", {n->input(0)});
         return InsertOp(
             g, "aten::neg",
             {InsertOp(g, "aten::amax",
                     {negated, g.insertConstant(std::vector<int64_t>{}),
                      g.insertConstant(false)})});
       }},
      {"aten::rsqrt",
       [](Graph& g, Node* n) -> Value* {
         return InsertOp(g, "aten::div",
                       {InsertOp(g, "aten::ones_like", {n->input(0)}),
                        InsertOp(g, "aten::sqrt", {n->input(0)})});
       }},
      {"aten::dropout",
       [](Graph& g, Node* n) -> Value* {
         auto p = ConstantOf(n->input(1)), train = ConstantOf(n->input(2));
         if (!p || !train || (train->toBool() && p->toDouble() != 0.0)) {
           return Reject(
               "training-mode dropout with p > 0 is random: not compiled");
         }
         return n->input(0);
       }},
  };
  return *rewrites;
}

}  // namespace decompose_internal
}  // namespace metafuse::compiler
