// A program fuzzer for the compiler's autodiff.
//
// With fixed seeds it builds random torch::jit::Graphs from the primitive
// set (and from ops that decompose into it), with random shapes and
// broadcasting, and checks, in float64:
//   (a) values: runtime::Program against eager ATen,
//   (b) first order: AppendVjp (cotangent v) against torch::autograd::grad,
//   (c) second order: AppendVjp applied to the graph that already holds the
//       first one, differentiating <grad, u>, against autograd's double
//       backward, and third order: AppendVjp once more, differentiating
//       <grad2, w>, against autograd's triple backward, wherever the rules
//       of the program's ops are themselves differentiable (a rule that is
//       not is counted by name, not failed),
//   (d) all of it again through SpecializedRunner: shape specialization,
//       vertical and horizontal fusion, buffer planning and LLVM-compiled
//       kernels, against the unfused program (first and cached runs).
// The eager reference evaluates each node's own operator (the dispatcher,
// autograd on) while the graph is built, so it is the op's ATen semantics,
// before decomposition. Domain-restricted ops get safe operands (log and
// sqrt of x^2 + c, division by y^2 + c, fractional powers of positives).
// About a third of the elementwise programs have exact zeros in their inputs
// (a random quarter of the entries), where ops with kinks (relu, abs, clamp,
// max) must follow autograd's conventions. METAFUSE_AUTODIFF_FUZZ_PROGRAMS
// sets the number of elementwise programs (2000 by default; docs/fuzzing.md
// reports a longer run).
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <unordered_map>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/torch.h>

#include "compiler/lowering/lower_to_program.h"
#include "compiler/autodiff/autodiff.h"
#include "compiler/decompose/decompose.h"
#include "tests/cpp/compiler/specialized_runner.h"
#include "runtime/executor/program.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Symbol;
using torch::jit::Value;

// A graph under construction with the eager value of each tensor in it.
class Builder {
 public:
  explicit Builder(uint64_t seed)
      : rng_(seed), graph_(std::make_shared<Graph>()) {
    torch::manual_seed(seed);
  }

  std::shared_ptr<Graph> graph() const { return graph_; }
  std::mt19937_64& rng() { return rng_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<at::Tensor>& input_tensors() const {
    return input_tensors_;
  }
  const std::vector<Value*>& pool() const { return pool_; }
  const at::Tensor& eager(Value* v) const { return eager_.at(v); }
  bool has_zero_inputs() const { return zero_inputs_; }
  void mark_zero_inputs() { zero_inputs_ = true; }
  std::string trace() const { return trace_.str(); }

  int64_t Int(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  double Real(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  bool Coin(double p = 0.5) { return Real(0.0, 1.0) < p; }

  Value* AddInput(const at::Tensor& t) {
    at::Tensor leaf = t.to(at::kDouble).detach().requires_grad_(true);
    Value* v = graph_->addInput();
    v->setType(c10::TensorType::create(leaf));
    inputs_.push_back(v);
    input_tensors_.push_back(leaf);
    eager_[v] = leaf;
    pool_.push_back(v);
    return v;
  }

  Value* Const(const c10::IValue& iv) { return graph_->insertConstant(iv); }

  // Inserts `op(args)` (schema matched), evaluates it eagerly with autograd
  // and records the result. Returns nullptr when eager rejects the call
  // (the generator then tries something else).
  Value* Emit(const char* op, const std::vector<torch::jit::NamedValue>& args,
              bool keep = true) {
    return EmitKw(op, args, {}, keep);
  }

  // With keyword arguments (alpha=, approximate=).
  Value* EmitKw(const char* op, const std::vector<torch::jit::NamedValue>& args,
                const std::vector<torch::jit::NamedValue>& kwargs,
                bool keep = true) {
    Value* out = graph_->insert(Symbol::fromQualString(op), args, kwargs);
    torch::jit::Node* node = out->node();
    // Schema matching may have converted an argument (a 0-dim tensor to
    // a Scalar, say): not what was asked for; drop the call.
    std::vector<torch::jit::Node*> conversions;
    for (Value* in : node->inputs()) {
      if (!eager_.count(in) && !torch::jit::toIValue(in) && !IsTensorList(in) &&
          !IntListOf(in)) {
        conversions.push_back(in->node());
      }
    }
    if (!conversions.empty()) {
      node->destroy();
      for (torch::jit::Node* c : conversions) {
        if (!c->hasUses()) c->destroy();
      }
      return nullptr;
    }
    return Run(node, keep) ? out : nullptr;
  }

  // A list of pool tensors, built in the graph (for cat / stack).
  Value* List(const std::vector<Value*>& items) {
    return graph_->insertNode(graph_->createList(c10::TensorType::get(), items))
        ->output();
  }

  // The first output of a multi-output op (max.dim, min.dim).
  Value* EmitFirstOf(const char* op, const std::vector<Value*>& args,
                     size_t num_outputs) {
    torch::jit::Node* node = graph_->insertNode(
        graph_->create(Symbol::fromQualString(op), args, num_outputs));
    if (node->maybeSchema() == nullptr) {
      node->destroy();
      return nullptr;
    }
    return Run(node, true) ? node->output(0) : nullptr;
  }

  // An int list argument as the tracer writes it half of the time: a
  // ListConstruct of constants (constant propagation leaves lists alone).
  Value* Ints(const std::vector<int64_t>& values) {
    if (Coin()) return Const(values);
    std::vector<Value*> items;
    for (int64_t v : values) items.push_back(Const(v));
    return graph_->insertNode(graph_->createList(c10::IntType::get(), items))
        ->output();
  }

 private:
  static c10::optional<std::vector<int64_t>> IntListOf(Value* v) {
    if (v->node()->kind() != torch::jit::prim::ListConstruct)
      return c10::nullopt;
    std::vector<int64_t> out;
    for (Value* in : v->node()->inputs()) {
      auto iv = torch::jit::toIValue(in);
      if (!iv || !iv->isInt()) return c10::nullopt;
      out.push_back(iv->toInt());
    }
    return out;
  }

  bool IsTensorList(Value* v) const {
    if (v->node()->kind() != torch::jit::prim::ListConstruct) return false;
    for (Value* in : v->node()->inputs()) {
      if (!eager_.count(in)) return false;
    }
    return true;
  }

  // Evaluates `node` eagerly (autograd on) and records its first output.
  bool Run(torch::jit::Node* node, bool keep) {
    torch::jit::Stack stack;
    for (Value* in : node->inputs()) {
      auto it = eager_.find(in);
      if (it != eager_.end()) {
        stack.push_back(it->second);
      } else if (auto ints = IntListOf(in)) {
        stack.push_back(*ints);
      } else if (IsTensorList(in)) {
        c10::List<at::Tensor> list;
        for (Value* item : in->node()->inputs())
          list.push_back(eager_.at(item));
        stack.push_back(list);
      } else {
        stack.push_back(*torch::jit::toIValue(in));
      }
    }
    try {
      node->getOperation()(stack);
    } catch (const c10::Error&) {
      node->destroy();
      return false;
    }
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      node->output(i)->setType(c10::TensorType::create(stack.at(i).toTensor()));
    }
    Value* out = node->output(0);
    eager_[out] = stack.at(0).toTensor();
    trace_ << "  " << *node;
    if (keep) pool_.push_back(out);
    return true;
  }

 public:
  // A recent value is more likely: programs become chains, not forests.
  Value* Pick() {
    const int64_t n = static_cast<int64_t>(pool_.size());
    if (Coin(0.7)) return pool_[std::max<int64_t>(0, n - 1 - Int(0, 1))];
    return pool_[Int(0, n - 1)];
  }

  std::vector<int64_t> Sizes(Value* v) const { return eager(v).sizes().vec(); }

 private:
  std::mt19937_64 rng_;
  std::shared_ptr<Graph> graph_;
  std::vector<Value*> inputs_, pool_;
  std::vector<at::Tensor> input_tensors_;
  std::unordered_map<Value*, at::Tensor> eager_;
  bool zero_inputs_ = false;
  std::ostringstream trace_;
};

bool Broadcastable(const std::vector<int64_t>& a,
                   const std::vector<int64_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const int64_t x = a[a.size() - 1 - i], y = b[b.size() - 1 - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

torch::jit::NamedValue Alpha(Value* v) {
  return torch::jit::NamedValue("alpha", v);
}

// x^2 + c: a positive operand for log, sqrt, division, fractional powers.
Value* Positive(Builder& b, Value* x, double c) {
  Value* sq = b.Emit("aten::mul", {x, x}, false);
  return b.Emit("aten::add", {sq, b.Const(c)}, false);
}

std::vector<int64_t> RandomDims(Builder& b, int64_t rank,
                                bool allow_empty = false) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (b.Coin(0.5)) dims.push_back(b.Coin(0.3) ? d - rank : d);
  }
  if (dims.empty() && !allow_empty && rank > 0)
    dims.push_back(b.Int(0, rank - 1));
  return dims;
}

int64_t Count(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// One random op on the pool; false when its preconditions did not hold.
bool RandomOp(Builder& b) {
  Value* x = b.Pick();
  const std::vector<int64_t> xs = b.Sizes(x);
  const int64_t rank = static_cast<int64_t>(xs.size());
  auto scalar = [&](double lo, double hi) { return b.Const(b.Real(lo, hi)); };
  switch (b.Int(0, 56)) {
    // ---- elementwise unary
    case 0:
      return b.Emit("aten::neg", {x});
    case 1:
      return b.Emit("aten::exp", {b.Emit("aten::tanh", {x}, false)});
    case 2:
      return b.Emit("aten::log", {Positive(b, x, 0.5)});
    case 3:
      return b.Emit("aten::tanh", {x});
    case 4:
      return b.Emit("aten::sigmoid", {x});
    case 5:
      return b.Emit("aten::relu", {x});
    case 6:
      return b.Emit("aten::sqrt", {Positive(b, x, 0.25)});
    case 7:
      return b.Emit("aten::pow",
                    {x, b.Const(static_cast<double>(b.Int(2, 3)))});
    case 8: {
      const double exponents[] = {0.5, -1.0, 1.5, -0.5};
      return b.Emit("aten::pow",
                    {Positive(b, x, 0.5), b.Const(exponents[b.Int(0, 3)])});
    }
    case 9:
      return b.Emit("aten::sin", {x});
    case 10:
      return b.Emit("aten::cos", {x});
    case 11:
      return b.Emit("aten::abs", {x});
    case 12:
      return b.Emit(b.Coin() ? "aten::clone" : "aten::contiguous", {x});
    case 13:
      return b.Emit("aten::mul", {x, scalar(-1.5, 1.5)});
    case 14:
      return b.Emit("aten::add", {x, scalar(-1.0, 1.0), b.Const(1.0)});
    case 15:
      return b.Emit("aten::rsub", {x, scalar(-1.0, 2.0), b.Const(1.0)});
    // ---- elementwise binary with broadcasting
    case 16:
    case 17:
    case 18:
    case 19:
    case 20:
    case 21: {
      Value* y = b.Pick();
      if (!Broadcastable(xs, b.Sizes(y))) return false;
      switch (b.Int(0, 6)) {
        case 0:
          return b.EmitKw("aten::add", {x, y},
                          {Alpha(b.Const(b.Coin() ? 1.0 : 0.5))});
        case 1:
          return b.EmitKw("aten::sub", {x, y},
                          {Alpha(b.Const(b.Coin() ? 1.0 : -2.0))});
        case 2:
          return b.Emit("aten::mul", {x, y});
        case 3:
          return b.Emit("aten::div", {x, Positive(b, y, 0.5)});
        case 4:
          return b.EmitKw("aten::rsub", {x, y},
                          {Alpha(b.Const(b.Coin() ? 1.0 : 3.0))});
        case 5:
          return b.Emit("aten::where",
                        {b.Emit("aten::gt", {x, y}, false), x, y});
        default:
          if (b.Coin(0.3)) {  // where.ScalarOther
            return b.Emit("aten::where",
                          {b.Emit("aten::lt", {x, b.Const(0.0)}, false), x,
                           b.Const(0.25)});
          }
          return b.Emit("aten::where",
                        {b.Emit("aten::lt", {x, b.Const(0.0)}, false),
                         b.Emit("aten::mul", {x, b.Const(0.1)}, false), y});
      }
    }
    // ---- reductions
    case 22:
      return b.Emit(b.Coin() ? "aten::sum" : "aten::mean", {x});
    case 23:
    case 24: {
      if (rank == 0) return false;
      const char* op = b.Coin() ? "aten::sum" : "aten::mean";
      return b.Emit(op, {x, b.Ints(RandomDims(b, rank)), b.Const(b.Coin())});
    }
    case 25: {
      if (rank == 0) return false;
      return b.Emit("aten::logsumexp",
                    {x, b.Ints(RandomDims(b, rank)), b.Const(b.Coin())});
    }
    case 26: {
      if (rank == 0) return false;
      Value* in = b.Coin() ? b.Emit("aten::relu", {x}, false) : x;  // ties
      return b.Emit("aten::amax",
                    {in, b.Ints(RandomDims(b, rank)), b.Const(b.Coin())});
    }
    // ---- shape
    case 27: {
      const int64_t numel = b.eager(x).numel();
      std::vector<int64_t> divisors;
      for (int64_t k = 1; k <= numel; ++k) {
        if (numel % k == 0) divisors.push_back(k);
      }
      const int64_t k = divisors[b.Int(0, divisors.size() - 1)];
      std::vector<int64_t> shape = b.Coin()
                                       ? std::vector<int64_t>{k, -1}
                                       : std::vector<int64_t>{numel / k, 1, k};
      const bool view = b.eager(x).is_contiguous() && b.Coin();
      return b.Emit(view ? "aten::view" : "aten::reshape", {x, b.Ints(shape)});
    }
    case 28: {
      if (rank < 2) return false;
      return b.Emit("aten::transpose", {x, b.Const(b.Int(0, rank - 1)),
                                        b.Const(b.Int(-rank, -1))});
    }
    case 29: {
      if (rank < 2) return false;
      std::vector<int64_t> perm(rank);
      for (int64_t i = 0; i < rank; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), b.rng());
      if (b.Coin(0.3)) perm[0] -= rank;
      if (b.Coin(0.3)) {  // movedim (metafuse.vmap's traces): one dim to another place
        return b.Emit("aten::movedim", {x, b.Const(b.Int(0, rank - 1)),
                                        b.Const(b.Int(-rank, rank - 1))});
      }
      return b.Emit("aten::permute", {x, b.Ints(perm)});
    }
    case 30: {
      if (rank != 2) return false;
      return b.Emit("aten::t", {x});
    }
    case 31: {
      if (rank >= 4) return false;
      return b.Emit("aten::unsqueeze", {x, b.Const(b.Int(-rank - 1, rank))});
    }
    case 32: {
      std::vector<int64_t> ones;
      for (int64_t d = 0; d < rank; ++d) {
        if (xs[d] == 1) ones.push_back(d);
      }
      if (ones.empty()) return false;
      return b.Emit("aten::squeeze",
                    {x, b.Const(ones[b.Int(0, ones.size() - 1)])});
    }
    case 33: {  // expand size-1 dims (and maybe a new leading dim)
      std::vector<int64_t> shape = xs;
      bool grows = false;
      for (auto& s : shape) {
        if (s == 1 && b.Coin(0.7))
          s = b.Int(2, 3), grows = true;
        else if (b.Coin(0.3))
          s = -1;
      }
      if (rank < 4 && b.Coin(0.3))
        shape.insert(shape.begin(), b.Int(2, 3)), grows = true;
      if (!grows) return false;
      return b.Emit("aten::expand", {x, b.Ints(shape)});
    }
    case 34: {  // sum_to_size: some dims to 1, maybe drop leading dims
      if (rank == 0) return false;
      std::vector<int64_t> shape = xs;
      for (auto& s : shape) {
        if (b.Coin(0.5)) s = 1;
      }
      if (b.Coin(0.3)) shape.erase(shape.begin());
      return b.Emit("aten::sum_to_size", {x, b.Ints(shape)});
    }
    case 35: {
      if (rank == 0) return false;
      const int64_t start = b.Int(0, rank - 1);
      return b.Emit("aten::flatten",
                    {x, b.Const(start), b.Const(b.Int(start, rank - 1))});
    }
    case 36: {  // constant_pad_nd: pad or crop the last dims; select / slice
      if (rank == 0) return false;
      if (b.Coin(0.3)) {
        const int64_t dim = b.Int(0, rank - 1), size = xs[dim];
        if (b.Coin()) {
          return b.Emit("aten::select", {x, b.Const(dim), b.Const(b.Int(-size, size - 1))});
        }
        const int64_t start = b.Int(0, size - 1);
        return b.Emit("aten::slice", {x, b.Const(dim), b.Const(start),
                                      b.Const(b.Int(start + 1, size)), b.Const(int64_t{1})});
      }
      std::vector<int64_t> pad;
      for (int64_t d = 0; d < std::min<int64_t>(rank, 2); ++d) {
        const int64_t size = xs[rank - 1 - d];
        for (int side = 0; side < 2; ++side) {
          pad.push_back(b.Coin(0.3) && size >= 3 ? -1 : b.Int(0, 2));
        }
      }
      return b.Emit("aten::constant_pad_nd", {x, b.Ints(pad), b.Const(0.0)});
    }
    // ---- linear algebra
    case 37: {
      if (rank == 3) {  // per-task products (metafuse.vmap's traces)
        for (Value* y : b.pool()) {
          auto ys = b.Sizes(y);
          if (ys.size() == 3 && ys[0] == xs[0] && ys[1] == xs[2] && b.Coin())
            return b.Emit("aten::bmm", {x, y});
        }
        return b.Emit("aten::bmm", {x, b.Emit("aten::transpose", {x, b.Const(int64_t{1}),
                                                                  b.Const(int64_t{2})},
                                              false)});
      }
      if (rank != 2) return false;
      for (Value* y : b.pool()) {
        auto ys = b.Sizes(y);
        if (ys.size() == 2 && ys[0] == xs[1] && b.Coin())
          return b.Emit("aten::mm", {x, y});
      }
      return b.Emit("aten::mm", {x, b.Emit("aten::t", {x}, false)});
    }
    // ---- indexing
    case 38: {
      if (rank == 0) return false;
      const int64_t dim = b.Int(0, rank - 1);
      std::vector<int64_t> shape = xs;
      shape[dim] = b.Int(1, 4);
      at::Tensor index = torch::randint(0, xs[dim], shape, torch::kLong);
      return b.Emit("aten::gather", {x, b.Const(dim), b.Const(index)});
    }
    case 39: {
      // src index-shaped (torch 1.13's own scatter_add backward is wrong
      // for a larger src; ScatterAddWithLargerSource checks that case).
      if (rank == 0) return false;
      Value* y = x;
      for (Value* candidate : b.pool()) {
        if (b.Sizes(candidate) == xs && candidate != x && b.Coin())
          y = candidate;
      }
      const int64_t dim = b.Int(0, rank - 1);
      std::vector<int64_t> shape = xs;
      shape[dim] = b.Int(1, xs[dim]);
      at::Tensor index = torch::randint(0, xs[dim], shape, torch::kLong);
      at::Tensor pick = torch::randint(0, xs[dim], shape, torch::kLong);
      Value* src =
          b.Emit("aten::gather", {y, b.Const(dim), b.Const(pick)}, false);
      return b.Emit("aten::scatter_add",
                    {x, b.Const(dim), b.Const(index), src});
    }
    // ---- ops that decompose into primitives
    case 40: {
      if (rank == 0) return false;
      const char* op = b.Coin() ? "aten::log_softmax" : "aten::softmax";
      return b.Emit(
          op, {x, b.Const(b.Int(-rank, rank - 1)), b.Const(c10::IValue())});
    }
    case 41: {
      if (b.Coin()) return b.Emit("aten::log_sigmoid", {x});
      Value* y =
          b.Emit("aten::mul", {x, b.Const(b.Coin() ? 4.0 : 30.0)}, false);
      return b.Emit("aten::softplus",
                    {y, b.Const(b.Coin() ? 1.0 : 2.0), b.Const(20.0)});
    }
    case 42: {
      Value* y = b.Pick();
      if (b.Sizes(y) != xs) return b.Emit("aten::square", {x});
      return b.Emit("aten::mse_loss", {x, y, b.Const(int64_t{b.Int(0, 2)})});
    }
    case 43: {
      if (rank < 2) {
        const int64_t which = b.Int(0, 2);
        if (which == 2) return b.Emit("aten::rsqrt", {Positive(b, x, 0.5)});
        Value* in = b.Coin() ? b.Emit("aten::relu", {x}, false) : x;  // ties
        return b.Emit(which == 0 ? "aten::max" : "aten::min", {in});
      }
      if (b.Coin()) {  // layer norm over the trailing 1 or 2 dims
        std::vector<int64_t> shape(xs.end() - b.Int(1, 2), xs.end());
        if (Count(shape) < 2) return false;  // one element normalizes to rounding noise
        return b.Emit("aten::layer_norm",
                      {x, b.Ints(shape), b.Const(c10::IValue()),
                       b.Const(c10::IValue()), b.Const(1e-5), b.Const(false)});
      }
      // batch norm in training mode over dim 1
      if (Count(xs) / xs[1] < 2) return false;  // one element per channel: noise
      return b.Emit(
          "aten::batch_norm",
          {x, b.Const(c10::IValue()), b.Const(c10::IValue()),
           b.Const(c10::IValue()), b.Const(c10::IValue()), b.Const(true),
           b.Const(0.1), b.Const(1e-5), b.Const(false)});
    }
    case 44: {  // cat / stack of same-shaped (but for dim) pool values
      if (rank == 0) return false;
      const bool stack = b.Coin();
      const int64_t dim =
          stack ? b.Int(-rank - 1, rank) : b.Int(-rank, rank - 1);
      const int64_t d = dim < 0 ? dim + rank : dim;
      std::vector<Value*> items = {x};
      for (Value* y : b.pool()) {
        auto ys = b.Sizes(y);
        bool fits = ys.size() == xs.size();
        for (int64_t k = 0; fits && k < rank; ++k)
          fits = ys[k] == xs[k] || (!stack && k == d);
        if (fits && b.Coin(0.6) && items.size() < 4) items.push_back(y);
      }
      if (b.Coin()) std::reverse(items.begin(), items.end());
      return b.Emit(stack ? "aten::stack" : "aten::cat",
                    {b.List(items), b.Const(dim)});
    }
    case 46: {  // activations that decompose, at their kinks too
      Value* in =
          b.Coin(0.3) ? b.Emit("aten::relu", {x}, false) : x;  // exact zeros
      switch (b.Int(0, 11)) {
        case 9:  // kinks at -3 and 3: scaled so that both are crossed
          return b.Emit("aten::hardswish", {b.Emit("aten::mul", {in, b.Const(4.0)}, false)});
        case 0:
          return b.Emit("aten::leaky_relu", {in, b.Const(0.1)});
        case 1:
          return b.Emit("aten::elu",
                        {in, b.Const(1.3), b.Const(1.0), b.Const(0.7)});
        case 2:
          return b.Emit("aten::selu", {in});
        case 3:
          return b.Emit("aten::silu", {in});
        case 4:
          return b.Emit("aten::mish", {in});
        case 5: {
          torch::jit::NamedValue approximate(
              "approximate", b.Const(b.Coin() ? "none" : "tanh"));
          return b.EmitKw("aten::gelu", {in}, {approximate});
        }
        case 6:
          return b.Emit("aten::hardtanh", {in, b.Const(0.0), b.Const(0.5)});
        case 7:
          return b.Emit("aten::clamp",
                        {in, b.Const(0.0),
                         b.Coin() ? b.Const(0.5) : b.Const(c10::IValue())});
        case 8:
          return b.Emit("aten::erf", {in});
        default: {
          Value* y = b.Coin() ? in : b.Pick();
          if (!Broadcastable(xs, b.Sizes(y))) return false;
          Value* other =
              b.Coin() ? b.Emit("aten::relu", {y}, false) : y;  // ties
          return b.Emit(b.Coin() ? "aten::maximum" : "aten::minimum",
                        {x, other});
        }
      }
    }
    case 47: {  // elementwise losses against a pool value or a constant target
      Value* y = b.Pick();
      if (b.Sizes(y) != xs) return false;
      Value* reduction = b.Const(int64_t{b.Int(0, 2)});
      switch (b.Int(0, 3)) {
        case 0:
          return b.Emit("aten::l1_loss", {x, y, reduction});
        case 1:
          return b.Emit("aten::smooth_l1_loss",
                        {x, y, reduction, b.Const(b.Coin() ? 0.3 : 0.7)});
        case 2:
          return b.Emit("aten::huber_loss", {x, y, reduction, b.Const(0.6)});
        default: {  // logits, maybe exact zeros (where softplus's kink would be)
          Value* logits = b.Coin(0.3) ? b.Emit("aten::relu", {x}, false) : x;
          Value* weight = b.Coin() ? b.Const(c10::IValue()) : y;
          Value* pos_weight =
              b.Coin() || rank == 0
                  ? b.Const(c10::IValue())
                  : b.Const(torch::rand({xs.back()}, torch::kDouble) + 0.5);
          return b.Emit("aten::binary_cross_entropy_with_logits",
                        {logits, b.Const(torch::rand(xs, torch::kDouble)), weight,
                         pos_weight, reduction});
        }
      }
    }
    case 48: {  // classification losses over dim 1
      if (rank < 2) return false;
      Value* reduction = b.Const(int64_t{b.Int(0, 2)});
      std::vector<int64_t> target_shape = xs;
      target_shape.erase(target_shape.begin() + 1);
      Value* none = b.Const(c10::IValue());
      switch (b.Int(0, 3)) {
        case 0:  // class indices, maybe smoothed
          return b.Emit("aten::cross_entropy_loss",
                        {x, b.Const(torch::randint(0, xs[1], target_shape, torch::kLong)),
                         none, reduction, b.Const(int64_t{-100}),
                         b.Const(b.Coin() ? 0.0 : 0.2)});
        case 1: {  // probabilities (a pool value's softmax: differentiated too)
          Value* y = b.Pick();
          if (b.Sizes(y) != xs) return false;
          Value* probs = b.Emit("aten::softmax", {y, b.Const(1), none}, false);
          return b.Emit("aten::cross_entropy_loss",
                        {x, probs, none, reduction, b.Const(int64_t{-100}),
                         b.Const(b.Coin() ? 0.0 : 0.1)});
        }
        case 2: {
          Value* log_probs = b.Emit("aten::log_softmax", {x, b.Const(1), none}, false);
          return b.Emit(b.Coin() ? "aten::nll_loss_nd" : "aten::nll_loss",
                        {log_probs,
                         b.Const(torch::randint(0, xs[1], target_shape, torch::kLong)), none,
                         reduction, b.Const(int64_t{-100})});
        }
        default: {  // KL divergence to a pool value's probabilities, or log ones
          Value* y = b.Pick();
          if (b.Sizes(y) != xs) return false;
          const bool log_target = b.Coin();
          Value* target =
              log_target ? b.Emit("aten::log_softmax", {y, b.Const(1), none}, false)
                         : b.Emit("aten::relu", {b.Emit("aten::tanh", {y}, false)}, false);
          torch::jit::NamedValue log_target_arg("log_target", b.Const(log_target));
          return b.EmitKw("aten::kl_div",
                          {b.Emit("aten::log_softmax", {x, b.Const(1), none}, false), target,
                           reduction},
                          {log_target_arg});
        }
      }
    }
    case 49: {  // normalizations and norms
      Value* none = b.Const(c10::IValue());
      switch (b.Int(0, 4)) {
        case 0: {  // group norm over 1 or 2 groups, or instance norm
          if (rank < 3) return false;
          if (Count({xs.begin() + 2, xs.end()}) < 2) return false;
          if (b.Coin(0.3)) {
            return b.Emit("aten::instance_norm",
                          {x, b.Coin() ? none : b.AddInput(torch::randn({xs[1]})), none,
                           none, none, b.Const(true), b.Const(0.1), b.Const(1e-5),
                           b.Const(false)});
          }
          const int64_t groups = xs[1] % 2 == 0 ? b.Int(1, 2) : 1;
          return b.Emit("aten::group_norm",
                        {x, b.Const(groups), b.AddInput(torch::randn({xs[1]})),
                         b.Coin() ? none : b.AddInput(torch::randn({xs[1]})), b.Const(1e-5),
                         b.Const(false)});
        }
        case 1: {  // var / std over some dims
          if (rank == 0) return false;
          std::vector<int64_t> dims = RandomDims(b, rank);
          int64_t count = 1;
          for (int64_t d : dims) count *= xs[d < 0 ? d + rank : d];
          if (count < 2) return false;
          return b.Emit(b.Coin() ? "aten::var" : "aten::std",
                        {x, b.Ints(dims), b.Const(b.Coin()), b.Const(b.Coin())});
        }
        case 2: {  // vector norms, zero vectors included
          if (rank == 0) return false;
          Value* in = b.Coin(0.3) ? b.Emit("aten::relu", {x}, false) : x;
          const double ord = std::vector<double>{2.0, 1.0, INFINITY}[b.Int(0, 2)];
          if (b.Coin()) {
            return b.Emit("aten::linalg_vector_norm",
                          {in, b.Const(ord), b.Ints(RandomDims(b, rank)), b.Const(b.Coin())});
          }
          return b.Emit("aten::norm", {in, b.Const(2.0), b.Ints(RandomDims(b, rank)),
                                       b.Const(b.Coin())});
        }
        case 3: {  // the layer norm functorch's batching rule emits
          if (rank == 0) return false;
          std::vector<int64_t> shape(xs.end() - b.Int(1, std::min<int64_t>(2, rank)), xs.end());
          if (Count(shape) < 2) return false;
          return b.EmitFirstOf("aten::native_layer_norm",
                               {x, b.Const(shape), b.AddInput(torch::randn(shape)),
                                b.AddInput(torch::randn(shape)), b.Const(1e-5)},
                               3) != nullptr;
        }
        default: {  // relu6 at both bounds, amin, one-sided clamps
          Value* in = b.Emit("aten::mul", {x, b.Const(6.0)}, false);
          switch (b.Int(0, 3)) {
            case 0:
              return b.Emit("aten::relu6", {b.Emit("aten::relu", {in}, false)});
            case 1:
              if (rank == 0) return false;
              return b.Emit("aten::amin", {x, b.Ints(RandomDims(b, rank)), b.Const(b.Coin())});
            case 2:
              return b.Emit("aten::clamp_min", {x, b.Const(0.1)});
            default:
              return b.Emit("aten::clamp_max", {x, b.Const(-0.1)});
          }
        }
      }
    }
    case 52: {  // log1p, expm1, cumsum, padding, nearest upsampling, detach, a
                // same-dtype to
      switch (b.Int(0, 6)) {
        case 6: {  // nearest (or nearest-exact) to a size or by scale factors
          if (rank != 3 && rank != 4) return false;
          const bool exact = b.Coin(0.3);
          const char* op = rank == 3 ? (exact ? "aten::_upsample_nearest_exact1d"
                                             : "aten::upsample_nearest1d")
                                     : (exact ? "aten::_upsample_nearest_exact2d"
                                              : "aten::upsample_nearest2d");
          const std::vector<double> choices = {2.0, 1.5, 0.7, 3.0};
          std::vector<int64_t> size;
          std::vector<double> scales;
          for (int64_t d = 2; d < rank; ++d) {
            scales.push_back(choices[b.Int(0, 3)]);
            size.push_back(b.Int(1, 2 * xs[d] + 1));
          }
          Value* none = b.Const(c10::IValue());
          return b.Coin() ? b.Emit(op, {x, b.Ints(size), none})
                          : b.Emit(op, {x, none, b.Const(c10::IValue(scales))});
        }
        case 4:  // the detached factor carries no gradient
          return b.Emit("aten::mul", {x, b.Emit("aten::detach", {b.Emit("aten::sin", {x}, false)},
                                                false)});
        case 5:
          return b.Emit("aten::to", {x, b.Const(static_cast<int64_t>(at::kDouble)),
                                     b.Const(false), b.Const(false)});
        case 0:  // log1p of x^2 + c (> -1), small arguments included
          return b.Emit("aten::log1p", {Positive(b, x, b.Coin() ? 1e-3 : 0.5)});
        case 1:
          return b.Emit("aten::expm1", {b.Emit("aten::tanh", {x}, false)});
        case 2:
          if (rank == 0) return false;
          return b.Emit("aten::cumsum", {x, b.Const(b.Int(-rank, rank - 1))});
        default: {
          if (rank == 0) return false;
          std::vector<int64_t> pad = {b.Int(0, 2), b.Int(0, 1)};
          if (rank > 1 && b.Coin()) {
            pad.push_back(b.Int(0, 1));
            pad.push_back(b.Int(0, 2));
          }
          // Another mode where eager takes it (ranks, padding below the
          // dim for reflect): Emit drops what eager rejects.
          const char* modes[] = {"constant", "reflect", "replicate", "circular"};
          const char* mode = b.Coin(0.5) ? modes[0] : modes[b.Int(1, 3)];
          Value* value = std::string(mode) != "constant" || b.Coin()
                             ? b.Const(c10::IValue())
                             : b.Const(0.25);
          return b.Emit("aten::pad", {x, b.Ints(pad), b.Const(mode), value});
        }
      }
    }
    case 53: {  // matmul with a new operand: vectors, stacks, broadcast stacks
      if (rank == 0 || rank > 3) return false;
      const int64_t inner = xs.back(), cols = b.Int(1, 3);
      std::vector<int64_t> other;
      switch (b.Int(0, 3)) {
        case 0: other = {inner}; break;                 // a vector
        case 1: other = {inner, cols}; break;           // one matrix
        case 2: other = {b.Int(1, 2), inner, cols}; break;  // a stack (maybe broadcast)
        default: {                                      // a stack like x's
          if (rank < 3) return false;
          other = {b.Coin() ? 1 : xs[0], inner, cols};
        }
      }
      return b.Emit("aten::matmul", {x, b.AddInput(torch::randn(other))});
    }
    case 54: {  // indexing, masking, rearranging (aten::index, whose Tensor?[]
                // list this builder does not make, is tested from Python)
      if (rank == 0) return false;
      const int64_t d = b.Int(0, rank - 1);
      auto random_index = [&](int64_t bound, std::vector<int64_t> shape) {
        return b.Const(torch::randint(0, bound, shape, torch::kLong));
      };
      switch (b.Int(0, 5)) {
        case 0:  // repeated picks: the gradient accumulates
          return b.Emit("aten::index_select", {x, b.Const(d), random_index(xs[d], {b.Int(1, 5)})});
        case 1:
          return b.Emit("aten::flip", {x, b.Ints(RandomDims(b, rank))});
        case 2: {
          std::vector<int64_t> repeats;
          for (int64_t i = 0; i < rank + b.Int(0, 1); ++i) repeats.push_back(b.Int(1, 2));
          return b.Emit("aten::repeat", {x, b.Ints(repeats)});
        }
        case 3:
          return b.Emit("aten::masked_fill",
                        {x, b.Const(torch::rand(xs) > 0.5), b.Const(0.25)});
        case 4:
          if (rank < 2) return false;
          return b.Emit(b.Coin() ? "aten::tril" : "aten::triu", {x, b.Const(b.Int(-1, 1))});
        default:  // sign of exact zeros too
          return b.Emit("aten::mul", {x, b.Emit("aten::sign", {b.Emit("aten::relu", {x}, false)},
                                                false)});
      }
    }
    case 55: {  // einsum: x alone, or with a new operand sharing some indices
      if (rank == 0 || rank > 3) return false;
      const std::string mine = std::string("abc").substr(0, rank);
      std::string theirs, pool = mine;
      std::vector<int64_t> their_sizes;
      const bool pair = b.Coin(0.75);
      if (pair) {
        for (int64_t i = 0; i < rank; ++i) {
          if (b.Coin(0.6)) {
            theirs += mine[i];
            their_sizes.push_back(xs[i]);
          }
        }
        for (char c : std::string("pq")) {
          if (b.Coin(0.4)) {
            theirs += c;
            their_sizes.push_back(b.Int(1, 3));
            pool += c;
          }
        }
        if (theirs.empty()) return false;
      }
      std::string out;
      for (char c : pool) {
        if (b.Coin(0.6)) out.insert(out.begin() + b.Int(0, static_cast<int64_t>(out.size())), c);
      }
      const std::string equation = mine + (pair ? "," + theirs : "") + "->" + out;
      std::vector<Value*> operands = {x};
      if (pair) operands.push_back(b.AddInput(torch::randn(their_sizes)));
      return b.Emit("aten::einsum", {b.Const(equation), b.List(operands)});
    }
    case 56: {  // reciprocal, log2 / log10, lerp, a tensor clamp, rounding
      switch (b.Int(0, 4)) {
        case 0:
          return b.Emit("aten::reciprocal", {Positive(b, x, 0.5)});
        case 1:
          return b.Emit(b.Coin() ? "aten::log2" : "aten::log10", {Positive(b, x, 0.5)});
        case 2: {
          Value* y = b.Pick();
          if (b.Sizes(y) != xs) return false;
          return b.Emit("aten::lerp", {x, y, b.Const(0.3)});
        }
        case 3: {  // clamp from below by a pool value
          Value* y = b.Pick();
          if (!Broadcastable(xs, b.Sizes(y)) || b.Sizes(y).size() > xs.size()) return false;
          return b.Emit("aten::clamp", {x, y, b.Const(c10::IValue())});
        }
        default: {  // plus the floor / round of a fresh input (exact in both:
                    // of a computed value, one rounding apart could jump by 1)
          Value* fresh = b.AddInput(torch::randn(xs) * 3);
          return b.Emit("aten::add", {x, b.Emit(b.Coin() ? "aten::floor" : "aten::round",
                                                {fresh}, false)});
        }
      }
    }
    case 51: {  // a recurrent layer over a [T, B, F] pool value (or [B, T, F])
      if (rank != 3 || xs[2] > 4) return false;
      const int64_t kind = b.Int(0, 3), layers = b.Int(1, 2), hidden = b.Int(1, 3);
      const bool bias = b.Coin(0.7), batch_first = b.Coin();
      const int64_t gates = kind == 2 ? 3 : kind == 3 ? 4 : 1;
      const int64_t batch = xs[batch_first ? 0 : 1];
      std::vector<Value*> weights;
      for (int64_t l = 0; l < layers; ++l) {
        const int64_t in = l == 0 ? xs[2] : hidden;
        weights.push_back(b.AddInput(torch::randn({gates * hidden, in}) * 0.5));
        weights.push_back(b.AddInput(torch::randn({gates * hidden, hidden}) * 0.5));
        if (bias) {
          weights.push_back(b.AddInput(torch::randn({gates * hidden}) * 0.5));
          weights.push_back(b.AddInput(torch::randn({gates * hidden}) * 0.5));
        }
      }
      Value* h0 = b.AddInput(torch::randn({layers, batch, hidden}));
      Value* hx = h0;
      if (kind == 3) hx = b.List({h0, b.AddInput(torch::randn({layers, batch, hidden}))});
      const char* op = std::vector<const char*>{"aten::rnn_tanh", "aten::rnn_relu", "aten::gru",
                                                "aten::lstm"}[kind];
      return b.EmitFirstOf(op,
                           {x, hx, b.List(weights), b.Const(bias), b.Const(layers), b.Const(0.0),
                            b.Const(true), b.Const(false), b.Const(batch_first)},
                           kind == 3 ? 3 : 2) != nullptr;
    }
    case 50: {  // embedding rows of a 2-D pool value
      if (rank != 2) return false;
      return b.Emit("aten::embedding",
                    {x, b.Const(torch::randint(0, xs[0], {b.Int(1, 3), b.Int(1, 4)}, torch::kLong)),
                     b.Const(int64_t{-1}), b.Const(false), b.Const(false)});
    }
    case 45: {  // max.dim / min.dim values (indices are not differentiable)
      if (rank == 0) return false;
      return b.EmitFirstOf(
          b.Coin() ? "aten::max" : "aten::min",
          {x, b.Const(b.Int(-rank, rank - 1)), b.Const(b.Coin())}, 2);
    }
    default: {
      Value* y = b.Pick();
      if (!Broadcastable(xs, b.Sizes(y))) return false;
      return b.Emit("aten::mul", {x, b.Emit("aten::sin", {y}, false)});
    }
  }
}

// A 4-D program: conv2d (random stride, padding, dilation, groups, bias),
// then maybe conv_transpose2d, an activation and max_pool2d or average
// pooling.
bool RandomConvProgram(Builder& b) {
  const int64_t groups = b.Int(1, 2);
  const int64_t n = b.Int(1, 3), c = groups * b.Int(1, 2),
                o = groups * b.Int(1, 2);
  const int64_t h = b.Int(3, 9), w = b.Int(3, 9);
  std::vector<int64_t> k = {b.Int(1, 3), b.Int(1, 3)},
                       s = {b.Int(1, 3), b.Int(1, 2)},
                       p = {b.Int(0, 2), b.Int(0, 1)},
                       d = {b.Int(1, 2), b.Int(1, 2)};
  for (int i = 0; i < 2; ++i) {
    const int64_t extent = (i == 0 ? h : w) + 2 * p[i] - d[i] * (k[i] - 1);
    if (extent < 1) return false;
  }
  Value* x = b.AddInput(torch::randn({n, c, h, w}));
  Value* weight = b.AddInput(torch::randn({o, c / groups, k[0], k[1]}) * 0.5);
  Value* bias =
      b.Coin() ? b.AddInput(torch::randn({o})) : b.Const(c10::IValue());
  Value* y = b.Emit("aten::conv2d", {x, weight, bias, b.Ints(s), b.Ints(p),
                                     b.Ints(d), b.Const(groups)});
  if (y == nullptr) return false;
  y = b.Emit(b.Coin() ? "aten::tanh" : "aten::sigmoid", {y});
  if (b.Coin()) {  // transposed convolution back up
    std::vector<int64_t> k2 = {b.Int(1, 3), b.Int(1, 3)},
                         s2 = {b.Int(1, 3), b.Int(1, 2)}, d2 = {b.Int(1, 2), 1},
                         p2 = {b.Int(0, 1), 0}, op2(2);
    for (int i = 0; i < 2; ++i) op2[i] = b.Int(0, std::max(s2[i], d2[i]) - 1);
    const int64_t g2 = o % 2 == 0 ? b.Int(1, 2) : 1;
    Value* weight2 =
        b.AddInput(torch::randn({o, b.Int(1, 2), k2[0], k2[1]}) * 0.5);
    Value* bias2 = b.Coin() ? b.Const(c10::IValue()) : nullptr;
    if (bias2 == nullptr)
      bias2 = b.AddInput(torch::randn({b.Sizes(weight2)[1] * g2}));
    Value* z = b.Emit("aten::conv_transpose2d",
                      {y, weight2, bias2, b.Ints(s2), b.Ints(p2), b.Ints(op2),
                       b.Const(g2), b.Ints(d2)});
    if (z == nullptr) return false;
    y = b.Emit("aten::relu", {z});
  }
  if (b.Coin(0.3)) {  // average pooling (the decomposable configurations)
    auto ys = b.Sizes(y);
    if (b.Coin(0.3)) {
      std::vector<int64_t> out = {1, 1};
      if (b.Coin() && ys[2] % 2 == 0 && ys[3] % 2 == 0)
        out = {ys[2] / 2, ys[3] / 2};
      return b.Emit("aten::adaptive_avg_pool2d", {y, b.Const(out)}) != nullptr;
    }
    std::vector<int64_t> k2 = {b.Int(1, std::min<int64_t>(3, ys[2])),
                               b.Int(1, std::min<int64_t>(2, ys[3]))};
    std::vector<int64_t> s2 = {b.Int(1, 2), b.Int(1, 2)},
                         p2 = {b.Int(0, k2[0] / 2), b.Int(0, k2[1] / 2)};
    c10::IValue divisor = b.Coin(0.2) ? c10::IValue(int64_t{3}) : c10::IValue();
    return b.Emit("aten::avg_pool2d",
                  {y, b.Ints(k2), b.Ints(s2), b.Ints(p2), b.Const(false),
                   b.Const(true), b.Const(divisor)}) != nullptr;
  }
  if (b.Coin(0.7)) {
    auto ys = b.Sizes(y);
    std::vector<int64_t> pk = {b.Int(1, 3), b.Int(1, 2)},
                         ps = {b.Int(1, 2), b.Int(1, 2)},
                         pp = {b.Int(0, pk[0] / 2), b.Int(0, pk[1] / 2)},
                         pd = {b.Int(1, 2), 1};
    // A window lying wholly in the padding makes torch 1.13's
    // max_pool2d_with_indices return out-of-range indices (its own backward
    // then corrupts memory): keep every window's extent within the input.
    for (int i = 0; i < 2; ++i) {
      if (ys[2 + i] < pd[i] * (pk[i] - 1) + 1) return true;  // no pooling
    }
    Value* pooled = b.Emit(
        "aten::max_pool2d",
        {y, b.Ints(pk), b.Ints(ps), b.Ints(pp), b.Ints(pd), b.Const(b.Coin())});
    if (pooled == nullptr) return false;
    y = pooled;
  }
  return true;
}

::testing::AssertionResult Close(const at::Tensor& got,
                                 const at::Tensor& expected,
                                 const std::string& what, double rtol = 1e-9,
                                 double atol = 1e-11) {
  if (got.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << what << ": shape " << got.sizes() << " vs " << expected.sizes();
  }
  const double scale =
      1.0 + (expected.numel() ? expected.abs().max().item<double>() : 0.0);
  if (torch::allclose(got, expected, rtol, atol * scale,
                      /*equal_nan=*/false)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << what << ": max abs diff "
         << (got - expected).abs().max().item<double>() << ", max |expected| "
         << scale - 1.0;
}

at::Tensor OrZeros(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() ? t.detach() : torch::zeros_like(like);
}

struct FuzzStats {
  int programs = 0, skipped = 0, failed = 0;
  int third_order = 0, zero_inputs = 0;
  std::map<std::string, int> third_unsupported;  // why order 3 was not compared
  int64_t fusion_groups = 0, fused_nodes = 0, horizontal = 0;
  std::map<std::string, int> ops;         // after decomposition
  std::map<std::string, int> source_ops;  // as generated
};

// Builds one program with `make`, then checks values, first and second
// order. Returns false (and reports) on a mismatch.
bool CheckProgram(uint64_t seed, const std::function<bool(Builder&)>& make,
                  FuzzStats& stats) {
  Builder b(seed);
  if (!make(b) || b.pool().size() <= b.inputs().size()) {
    ++stats.skipped;
    return true;
  }
  auto graph = b.graph();
  Value* out = b.pool().back();
  at::Tensor out_eager = b.eager(out);
  graph->registerOutput(out);
  std::string context;
  {
    std::ostringstream os;
    os << "seed " << seed << "\nops:\n" << b.trace();
    context = os.str();
  }
  // ATen's normalization backwards are not exact when differentiated a
  // second time (their double backward treats the saved statistics as
  // constants: layer_norm's third derivative is off finite differences of
  // its second by the derivative's own scale; the same formula written in
  // primitives matches them to 1e-7), so no third-order reference exists
  // for programs that hold one.
  static const std::set<std::string> kNoExactTripleBackward = {
      "aten::batch_norm", "aten::layer_norm", "aten::group_norm", "aten::instance_norm",
      "aten::native_layer_norm", "aten::native_batch_norm"};
  // At exactly 0, ATen's elu and selu take their first derivative from the
  // left branch (scale alpha) and their second from the right one (0): no
  // one function has both, so above first order there is no reference
  // where such a program's inputs hold exact zeros.
  static const std::set<std::string> kInconsistentAtZero = {"aten::elu", "aten::selu"};
  std::string inexact_reference, inconsistent_at_zero;
  for (torch::jit::Node* node : graph->nodes()) {
    ++stats.source_ops[node->kind().toQualString()];
    if (kNoExactTripleBackward.count(node->kind().toQualString())) {
      inexact_reference = node->kind().toQualString();
    }
    if (b.has_zero_inputs() && kInconsistentAtZero.count(node->kind().toQualString())) {
      inconsistent_at_zero = node->kind().toQualString();
    }
  }
  auto unsupported = DecomposeToPrimitives(graph);
  EXPECT_TRUE(unsupported.empty())
      << context << "undecomposed: " << unsupported[0];
  if (!unsupported.empty()) return false;
  out = graph->outputs()[0];
  for (torch::jit::Node* node : graph->nodes())
    ++stats.ops[node->kind().toQualString()];

  // Cotangent v for (b), directions u for (c).
  Value* v = graph->addInput("v");
  v->setType(c10::TensorType::create(out_eager));
  at::Tensor v_tensor = torch::randn_like(out_eager);
  std::vector<Value*> wrt = b.inputs();
  std::vector<at::Tensor> leaves = b.input_tensors();
  std::vector<Value*> us;
  std::vector<at::Tensor> u_tensors;
  for (const auto& leaf : leaves) {
    us.push_back(graph->addInput("u"));
    us.back()->setType(c10::TensorType::create(leaf));
    u_tensors.push_back(torch::randn_like(leaf).detach());
  }
  std::vector<Value*> grads, grads2;
  try {
    grads = AppendVjp(*graph, {out}, {v}, wrt);
    torch::jit::WithInsertPoint at_end(graph->return_node());
    Value* s = nullptr;
    for (size_t i = 0; i < grads.size(); ++i) {
      Value* term =
          graph->insert(Symbol::fromQualString("aten::sum"),
                        {graph->insert(Symbol::fromQualString("aten::mul"),
                                       {grads[i], us[i]})});
      s = s ? graph->insert(Symbol::fromQualString("aten::add"), {s, term})
            : term;
    }
    Value* seed2 =
        graph->insert(Symbol::fromQualString("aten::ones_like"), {s});
    grads2 = AppendVjp(*graph, {s}, {seed2}, wrt);
  } catch (const UnsupportedOp& e) {
    ADD_FAILURE() << context << "UnsupportedOp: " << e.what() << "\n" << *graph;
    return false;
  }
  for (Value* g : grads) graph->registerOutput(g);
  for (Value* g : grads2) graph->registerOutput(g);

  // (c') Third order, on a copy: where a rule's own output is not
  // differentiable, AppendVjp throws and the checks above still run on the
  // graph without it.
  std::vector<at::Tensor> w_tensors;
  {
    std::shared_ptr<Graph> g3 = graph->copy();
    const size_t L = leaves.size();
    std::vector<Value*> wrt3(g3->inputs().begin(), g3->inputs().begin() + L);
    try {
      torch::jit::WithInsertPoint at_end(g3->return_node());
      Value* s2 = nullptr;
      for (size_t i = 0; i < L; ++i) {
        Value* w = g3->addInput("w");
        w->setType(c10::TensorType::create(leaves[i]));
        w_tensors.push_back(torch::randn_like(leaves[i]).detach());
        Value* term = g3->insert(
            Symbol::fromQualString("aten::sum"),
            {g3->insert(Symbol::fromQualString("aten::mul"), {g3->outputs()[1 + L + i], w})});
        s2 = s2 ? g3->insert(Symbol::fromQualString("aten::add"), {s2, term}) : term;
      }
      Value* seed3 = g3->insert(Symbol::fromQualString("aten::ones_like"), {s2});
      std::vector<Value*> grads3 = AppendVjp(*g3, {s2}, {seed3}, wrt3);
      for (Value* g : grads3) g3->registerOutput(g);
      graph = g3;
    } catch (const UnsupportedOp& e) {
      ++stats.third_unsupported[e.what()];
      w_tensors.clear();
    }
  }

  std::vector<c10::IValue> inputs;
  for (const auto& leaf : leaves) inputs.push_back(leaf.detach());
  inputs.push_back(v_tensor);
  for (const auto& u : u_tensors) inputs.push_back(u);
  for (const auto& w : w_tensors) inputs.push_back(w);
  const bool third_order = !w_tensors.empty();
  std::vector<c10::IValue> results;
  try {
    runtime::Program program = MakeProgram(*graph);
    results = program.Run(inputs);
  } catch (const c10::Error& e) {
    ADD_FAILURE() << context << "runtime error: " << e.what_without_backtrace()
                  << "\n"
                  << *graph;
    return false;
  }

  // Eager: autograd, first order with a graph, then the double backward.
  auto first = torch::autograd::grad(
      {out_eager}, leaves, {v_tensor}, /*retain_graph=*/true,
      /*create_graph=*/true, /*allow_unused=*/true);
  at::Tensor s_eager = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (first[i].defined()) s_eager = s_eager + (first[i] * u_tensors[i]).sum();
  }
  std::vector<at::Tensor> second(leaves.size()), third(leaves.size());
  if (s_eager.requires_grad()) {
    second = torch::autograd::grad({s_eager}, leaves, {}, /*retain_graph=*/true,
                                   /*create_graph=*/third_order, true);
  }
  bool compare_third = third_order;
  if (third_order && !inexact_reference.empty()) {
    ++stats.third_unsupported["eager reference: ATen's " + inexact_reference +
                              " has no exact triple backward"];
    compare_third = false;
  } else if (third_order) {
    at::Tensor s2_eager = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (second[i].defined()) s2_eager = s2_eager + (second[i] * w_tensors[i]).sum();
    }
    try {
      if (s2_eager.requires_grad()) {
        third = torch::autograd::grad({s2_eager}, leaves, {}, false, false, true);
      }
    } catch (const c10::Error&) {
      // ATen has no triple backward for some op here: nothing to compare to.
      ++stats.third_unsupported["eager: no triple backward in ATen"];
      compare_third = false;
    }
  }
  // Overflow (x^3 of x^3 of ...) leaves the domain where a comparison means
  // anything: such programs are skipped, not compared.
  bool finite = torch::isfinite(out_eager).all().item<bool>();
  for (size_t i = 0; i < leaves.size(); ++i) {
    for (const at::Tensor& t : {first[i], second[i], third[i]}) {
      if (t.defined()) finite = finite && torch::isfinite(t).all().item<bool>();
    }
  }
  if (!finite) {
    ++stats.skipped;
    return true;
  }
  bool ok = true;
  // Third order sums three times as many rounded terms: 1e-8 / 1e-9.
  auto check = [&](const at::Tensor& got, const at::Tensor& expected,
                   const std::string& what, double rtol = 1e-9, double atol = 1e-11) {
    auto result = Close(got, expected, what, rtol, atol);
    if (!result) {
      ok = false;
      ADD_FAILURE() << context << result.message() << "\n" << *graph;
    }
  };
  // (d) The fused program computes what the unfused one does.
  try {
    StageLog log;
    SpecializedRunner fused(graph->copy(), "fuzz", &log);
    fused.set_fusion(true);
    for (const char* run : {"first fused run", "cached fused run"}) {
      std::vector<c10::IValue> got = fused.Run(inputs);
      for (size_t k = 0; k < results.size() && ok; ++k) {
        check(got[k].toTensor(), results[k].toTensor(),
              std::string(run) + ", output " + std::to_string(k));
      }
      if (!ok) ADD_FAILURE() << "fused:\n" << log.stages().back().second;
    }
    const SpecializationReport report = fused.report();
    if (!report.fallback.empty()) {
      ok = false;
      ADD_FAILURE() << context << "fusion fell back: " << report.fallback;
    }
    stats.fusion_groups += report.fusion_groups;
    stats.fused_nodes += report.fused_nodes;
    stats.horizontal += report.horizontal_nodes;
  } catch (const c10::Error& e) {
    ok = false;
    ADD_FAILURE() << context << "fused runtime error: " << e.what_without_backtrace();
  }
  check(results[0].toTensor(), out_eager.detach(), "value");
  for (size_t i = 0; i < leaves.size() && ok; ++i) {
    check(results[1 + i].toTensor(), OrZeros(first[i], leaves[i]),
          "first-order gradient " + std::to_string(i));
  }
  const bool compare_second = inconsistent_at_zero.empty();
  if (!compare_second) {
    ++stats.third_unsupported["above first order at exact zeros: ATen's " +
                              inconsistent_at_zero + " has no one convention there"];
    compare_third = false;
  }
  for (size_t i = 0; i < leaves.size() && ok && compare_second; ++i) {
    check(results[1 + leaves.size() + i].toTensor(),
          OrZeros(second[i], leaves[i]),
          "second-order gradient " + std::to_string(i));
  }
  for (size_t i = 0; i < leaves.size() && ok && compare_third; ++i) {
    check(results[1 + 2 * leaves.size() + i].toTensor(),
          OrZeros(third[i], leaves[i]),
          "third-order gradient " + std::to_string(i), 1e-8, 1e-9);
  }
  if (compare_third) ++stats.third_order;
  if (b.has_zero_inputs()) ++stats.zero_inputs;
  ++stats.programs;
  if (!ok) ++stats.failed;
  return ok;
}

// Random inputs whose shapes broadcast against a base shape, then a random
// chain of ops.
bool RandomElementwiseProgram(Builder& b) {
  const int64_t rank = b.Int(1, 3);
  std::vector<int64_t> base;
  for (int64_t d = 0; d < rank; ++d) base.push_back(b.Int(1, 4));
  const int64_t num_inputs = b.Int(1, 3);
  for (int64_t i = 0; i < num_inputs; ++i) {
    std::vector<int64_t> shape = base;
    for (auto& s : shape) {
      if (b.Coin(0.25)) s = 1;
    }
    if (shape.size() > 1 && b.Coin(0.2)) shape.erase(shape.begin());
    at::Tensor input = torch::randn(shape);
    if (b.Coin(0.35)) {  // exact zeros: a random quarter of the entries
      input = input * (torch::rand(shape) > 0.25).to(input.scalar_type());
      b.mark_zero_inputs();
    }
    b.AddInput(input);
  }
  const int64_t length = b.Int(3, 9);
  int64_t emitted = 0;
  for (int attempts = 0; emitted < length && attempts < 100; ++attempts) {
    if (RandomOp(b)) ++emitted;
  }
  return emitted > 0;
}

// scatter_add reads only the index-shaped leading block of src: the
// gradient w.r.t. src is the gathered cotangent, zero elsewhere. Reference:
// autograd of scatter_add on that block (narrowed src).
TEST(AutodiffRules, ScatterAddWithLargerSource) {
  auto graph = std::make_shared<Graph>();
  Value* self = graph->addInput();
  Value* src = graph->addInput();
  Value* v = graph->addInput();
  torch::manual_seed(11);
  at::Tensor self_t = torch::randn({4, 3}, torch::kDouble).requires_grad_(true);
  at::Tensor src_t = torch::randn({5, 4}, torch::kDouble).requires_grad_(true);
  at::Tensor index = torch::randint(0, 4, {2, 3}, torch::kLong);
  self->setType(c10::TensorType::create(self_t));
  src->setType(c10::TensorType::create(src_t));
  Value* out = graph->insert(Symbol::fromQualString("aten::scatter_add"),
                             {self, graph->insertConstant(int64_t{0}),
                              graph->insertConstant(index), src});
  out->setType(c10::TensorType::create(self_t));
  v->setType(c10::TensorType::create(self_t));
  auto grads = AppendVjp(*graph, {out}, {v}, {self, src});
  graph->registerOutput(out);
  for (Value* g : grads) graph->registerOutput(g);
  at::Tensor v_t = torch::randn({4, 3}, torch::kDouble);
  auto results =
      MakeProgram(*graph).Run({self_t.detach(), src_t.detach(), v_t});
  at::Tensor block = src_t.narrow(0, 0, 2).narrow(1, 0, 3);
  at::Tensor expected = self_t.scatter_add(0, index, block);
  auto eager = torch::autograd::grad({expected}, {self_t, src_t}, {v_t});
  EXPECT_TRUE(Close(results[0].toTensor(), expected.detach(), "value"));
  EXPECT_TRUE(Close(results[1].toTensor(), eager[0], "d self"));
  EXPECT_TRUE(Close(results[2].toTensor(), eager[1], "d src"));
}

// relu's gradient masks by its result (relu(x) > 0 exactly where x > 0): x
// is read by relu alone, so the backward program need not save it beside the
// result that the next layer keeps anyway. Zeros and negatives included.
TEST(AutodiffRules, ReluMasksByItsResult) {
  auto graph = std::make_shared<Graph>();
  Value* x = graph->addInput();
  Value* v = graph->addInput();
  at::Tensor x_t = torch::tensor({-2.0, -0.0, 0.0, 0.5, 3.0}, torch::kDouble).requires_grad_(true);
  x->setType(c10::TensorType::create(x_t));
  v->setType(c10::TensorType::create(x_t));
  Value* out = graph->insert(Symbol::fromQualString("aten::relu"), {x});
  out->setType(c10::TensorType::create(x_t));
  auto grads = AppendVjp(*graph, {out}, {v}, {x});
  graph->registerOutput(grads[0]);
  EXPECT_EQ(x->uses().size(), 1u) << *graph;
  at::Tensor v_t = torch::arange(1, 6, torch::kDouble);
  auto results = MakeProgram(*graph).Run({x_t.detach(), v_t});
  auto eager = torch::autograd::grad({torch::relu(x_t)}, {x_t}, {v_t});
  EXPECT_TRUE(Close(results[0].toTensor(), eager[0], "d x"));
}

// METAFUSE_AUTODIFF_FUZZ_PROGRAMS overrides the count (docs/fuzzing.md).
int ElementwisePrograms() {
  const char* n = std::getenv("METAFUSE_AUTODIFF_FUZZ_PROGRAMS");
  return n != nullptr && std::atoi(n) > 0 ? std::atoi(n) : 2000;
}
// METAFUSE_AUTODIFF_FUZZ_FIRST_SEED starts elsewhere (to rerun one program).
int FirstSeed() {
  const char* n = std::getenv("METAFUSE_AUTODIFF_FUZZ_FIRST_SEED");
  return n != nullptr && std::atoi(n) > 0 ? std::atoi(n) : 1000;
}
constexpr int kConvPrograms = 200;

TEST(AutodiffFuzz, RandomProgramsMatchAutogradToThirdOrder) {
  FuzzStats stats;
  const int kElementwisePrograms = ElementwisePrograms();
  for (int i = 0; i < kElementwisePrograms && stats.failed < 3; ++i) {
    CheckProgram(FirstSeed() + i, RandomElementwiseProgram, stats);
  }
  std::ostringstream generated, primitive;
  for (const auto& [op, count] : stats.source_ops)
    generated << op << ":" << count << " ";
  for (const auto& [op, count] : stats.ops)
    primitive << op << ":" << count << " ";
  std::cout << "fuzzed " << stats.programs << " programs (" << stats.skipped
            << " skipped)\ngenerated ops: " << generated.str()
            << "\nops after decomposition: " << primitive.str()
            << "\nfusion: " << stats.fusion_groups << " groups of " << stats.fused_nodes
            << " ops, " << stats.horizontal << " horizontal merges\n"
            << "third order compared in " << stats.third_order << " programs; "
            << stats.zero_inputs << " programs with exact zeros in their inputs\n";
  for (const auto& [why, count] : stats.third_unsupported)
    std::cout << "  third order not compared (" << count << "x): " << why << "\n";
  EXPECT_EQ(stats.failed, 0);
  EXPECT_GE(stats.programs, kElementwisePrograms * 9 / 10);
  // Third order and exact zeros really were exercised.
  EXPECT_GE(stats.third_order, stats.programs / 3);
  EXPECT_GE(stats.zero_inputs, stats.programs / 5);
  // The fused side really fused: elementwise chains and their derivatives.
  EXPECT_GE(stats.fusion_groups, kElementwisePrograms);
  EXPECT_GT(stats.horizontal, 0);
  // Every kind of op the generator knows was generated (none silently
  // dropped by schema matching or by eager).
  for (const char* op : {"aten::add",         "aten::sub",
                         "aten::rsub",        "aten::div",
                         "aten::where",       "aten::sum",
                         "aten::mean",        "aten::logsumexp",
                         "aten::amax",        "aten::reshape",
                         "aten::view",        "aten::transpose",
                         "aten::permute",     "aten::t",
                         "aten::unsqueeze",   "aten::squeeze",
                         "aten::expand",      "aten::sum_to_size",
                         "aten::flatten",     "aten::constant_pad_nd",
                         "aten::mm",          "aten::gather",
                         "aten::bmm",         "aten::movedim",
                         "aten::select",      "aten::slice",
                         "aten::scatter_add", "aten::log_softmax",
                         "aten::softmax",     "aten::softplus",
                         "aten::log_sigmoid", "aten::mse_loss",
                         "aten::square",      "aten::batch_norm",
                         "aten::layer_norm",  "aten::max",
                         "aten::min",         "aten::rsqrt",
                         "aten::cat",         "aten::stack",
                         "aten::leaky_relu",  "aten::elu",
                         "aten::selu",        "aten::silu",
                         "aten::mish",        "aten::gelu",
                         "aten::hardtanh",    "aten::clamp",
                         "aten::erf",         "aten::maximum",
                         "aten::minimum",     "aten::pow",
                         "aten::sqrt",        "aten::log",
                         "aten::l1_loss",     "aten::smooth_l1_loss",
                         "aten::huber_loss",  "aten::binary_cross_entropy_with_logits",
                         "aten::cross_entropy_loss", "aten::nll_loss",
                         "aten::nll_loss_nd", "aten::kl_div",
                         "aten::group_norm",  "aten::instance_norm",
                         "aten::var",         "aten::std",
                         "aten::linalg_vector_norm", "aten::norm",
                         "aten::native_layer_norm",
                         "aten::relu6",       "aten::amin",
                         "aten::clamp_min",   "aten::clamp_max",
                         "aten::embedding",   "aten::rnn_tanh",
                         "aten::rnn_relu",    "aten::gru",
                         "aten::lstm",        "aten::log1p",
                         "aten::expm1",       "aten::cumsum",
                         "aten::pad",         "aten::detach",
                         "aten::to",          "aten::matmul",
                         "aten::index_select",
                         "aten::flip",        "aten::repeat",
                         "aten::masked_fill", "aten::tril",
                         "aten::triu",        "aten::sign",
                         "aten::einsum",      "aten::reciprocal",
                         "aten::log2",        "aten::log10",
                         "aten::lerp",        "aten::floor",
                         "aten::round"}) {
    EXPECT_GT(stats.source_ops[op], 0) << op << " was never generated";
  }
}

TEST(AutodiffFuzz, RandomConvolutionProgramsMatchAutogradToSecondOrder) {
  FuzzStats stats;
  for (int i = 0; i < kConvPrograms && stats.failed < 3; ++i) {
    CheckProgram(5000 + i, RandomConvProgram, stats);
  }
  std::ostringstream generated;
  for (const auto& [op, count] : stats.source_ops)
    generated << op << ":" << count << " ";
  std::cout << "fuzzed " << stats.programs << " convolution programs ("
            << stats.skipped << " skipped)\ngenerated ops: " << generated.str()
            << "\n";
  for (const char* op :
       {"aten::conv2d", "aten::conv_transpose2d", "aten::max_pool2d",
        "aten::avg_pool2d", "aten::adaptive_avg_pool2d"}) {
    EXPECT_GT(stats.source_ops[op], 0) << op << " was never generated";
  }
  EXPECT_EQ(stats.failed, 0);
  EXPECT_GE(stats.programs, kConvPrograms / 2);
}

}  // namespace
}  // namespace metafuse::compiler
