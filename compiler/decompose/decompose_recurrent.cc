// Decompositions of the recurrent layers nn.RNN, nn.GRU and nn.LSTM run
// (aten::rnn_tanh, rnn_relu, gru, lstm) into their cells, unrolled over the
// static sequence length (decompose_rewrite.h). Each cell is ATen's CPU cell
// written in primitives, with its operations in ATen's order:
//   RNN   h' = act(h W_hh^T + b_hh + (x W_ih^T + b_ih))
//   GRU   r = sigmoid(gh_r + gi_r), z = sigmoid(gh_z + gi_z),
//         n = tanh(gi_n + gh_n * r), h' = (h - n) * z + n
//   LSTM  gates = h W_hh^T + b_hh + (x W_ih^T + b_ih); i, f, o = sigmoid,
//         g = tanh of its quarters; c' = f * c + i * g, h' = o * tanh(c')
// Layers stack; batch_first either way. Declined with the reason:
// bidirectional layers, dropout between layers in training mode (random),
// LSTM projections (proj_size).
#include <torch/csrc/jit/ir/constants.h>
#include <torch/torch.h>

#include <vector>

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

namespace metafuse::compiler::decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

enum class CellKind { kTanh, kRelu, kGru, kLstm };

int64_t GateCount(CellKind kind) {
  return kind == CellKind::kGru ? 3 : kind == CellKind::kLstm ? 4 : 1;
}

// Inserts ops whose results get static types (the rules of later passes read
// ranks), all of the input's dtype and device.
struct Builder {
  Graph& g;
  c10::TensorTypePtr like;

  Value* Typed(Value* v, const std::vector<int64_t>& sizes) const {
    v->setType(like->withSizes(sizes));
    return v;
  }
  // x [B, F] times w [G, F] transposed, plus b [G] (if any): [B, G].
  Value* Linear(Value* x, Value* w, Value* b, int64_t batch,
                int64_t out) const {
    Value* y = Typed(InsertOp(g, "aten::mm", {x, InsertOp(g, "aten::t", {w})}),
                     {batch, out});
    return b == nullptr ? y
                        : Typed(InsertOp(g, "aten::add", {y, b}), {batch, out});
  }
  Value* Op(const char* op, std::vector<torch::jit::NamedValue> args,
            const std::vector<int64_t>& sizes) const {
    return Typed(InsertOp(g, op, std::move(args)), sizes);
  }
  // Quarter / third `k` of [B, count * H] gates along dim 1.
  Value* Gate(Value* gates, int64_t k, int64_t batch, int64_t hidden) const {
    return Typed(Crop(g, gates, 1, k * hidden, (k + 1) * hidden),
                 {batch, hidden});
  }
  // x[index] along dim, that dim dropped.
  Value* Select(Value* x, int64_t dim, int64_t index,
                std::vector<int64_t> sizes) const {
    Value* piece = Crop(g, x, dim, index, index + 1);
    std::vector<int64_t> kept = sizes;
    kept[dim] = 1;
    Typed(piece, kept);
    sizes.erase(sizes.begin() + dim);
    return Op("aten::squeeze", {piece, g.insertConstant(dim)}, sizes);
  }
  // The pieces [B, H] stacked along a new `dim`.
  Value* Stack(const std::vector<Value*>& pieces, int64_t dim, int64_t batch,
               int64_t hidden) const {
    std::vector<Value*> grown;
    std::vector<int64_t> sizes = {batch, hidden};
    sizes.insert(sizes.begin() + dim, 1);
    for (Value* p : pieces)
      grown.push_back(Op("aten::unsqueeze", {p, g.insertConstant(dim)}, sizes));
    return Concatenate(g, grown, dim);
  }
};

// One step of a cell: the new hidden state (and cell state for the LSTM).
struct State {
  Value* h;
  Value* c = nullptr;
};

State Step(const Builder& b, CellKind kind, Value* x, const State& state,
           Value* w_ih, Value* w_hh, Value* b_ih, Value* b_hh, int64_t batch,
           int64_t hidden) {
  const int64_t width = GateCount(kind) * hidden;
  Value* gi = b.Linear(x, w_ih, b_ih, batch, width);
  Value* gh = b.Linear(state.h, w_hh, b_hh, batch, width);
  const std::vector<int64_t> shape = {batch, hidden};
  switch (kind) {
    case CellKind::kTanh:
    case CellKind::kRelu:
      return {b.Op(kind == CellKind::kTanh ? "aten::tanh" : "aten::relu",
                   {b.Op("aten::add", {gh, gi}, shape)}, shape)};
    case CellKind::kGru: {
      // sigmoid(hidden part + input part) of gate k
      auto sigmoid_gate = [&](int64_t k) {
        Value* sum =
            b.Op("aten::add",
                 {b.Gate(gh, k, batch, hidden), b.Gate(gi, k, batch, hidden)},
                 shape);
        return b.Op("aten::sigmoid", {sum}, shape);
      };
      Value *r = sigmoid_gate(0), *z = sigmoid_gate(1);
      Value* n = b.Op(
          "aten::tanh",
          {b.Op("aten::add",
                {b.Gate(gi, 2, batch, hidden),
                 b.Op("aten::mul", {b.Gate(gh, 2, batch, hidden), r}, shape)},
                shape)},
          shape);
      Value* keep =
          b.Op("aten::mul", {b.Op("aten::sub", {state.h, n}, shape), z}, shape);
      return {b.Op("aten::add", {keep, n}, shape)};
    }
    case CellKind::kLstm: {
      Value* gates = b.Op("aten::add", {gh, gi}, {batch, width});
      auto gate = [&](int64_t k, const char* act) {
        return b.Op(act, {b.Gate(gates, k, batch, hidden)}, shape);
      };
      Value *i = gate(0, "aten::sigmoid"), *f = gate(1, "aten::sigmoid"),
            *cell = gate(2, "aten::tanh"), *o = gate(3, "aten::sigmoid");
      Value* c = b.Op("aten::add",
                      {b.Op("aten::mul", {f, state.c}, shape),
                       b.Op("aten::mul", {i, cell}, shape)},
                      shape);
      return {b.Op("aten::mul", {o, b.Op("aten::tanh", {c}, shape)}, shape), c};
    }
  }
  return {};
}

// (input, hx, params, has_biases, num_layers, dropout, train,
// bidirectional, batch_first) -> (output, h_n[, c_n]); hx is a tensor, or
// for the LSTM a list [h_0, c_0].
std::vector<Value*> Recurrent(Graph& g, Node* n, CellKind kind) {
  auto fail = [](const char* why) {
    Reject(why);
    return std::vector<Value*>{};
  };
  if (n->inputs().size() != 9)
    return fail("the (input, hx, params, ...) form expected");
  auto has_biases = ConstantOf(n->input(3)), layers = ConstantOf(n->input(4)),
       dropout = ConstantOf(n->input(5)), train = ConstantOf(n->input(6)),
       bidirectional = ConstantOf(n->input(7)),
       batch_first = ConstantOf(n->input(8));
  if (!has_biases || !layers || !dropout || !train || !bidirectional ||
      !batch_first)
    return fail("constant layer options expected");
  if (bidirectional->toBool())
    return fail("bidirectional layers are not compiled");
  if (train->toBool() && dropout->toDouble() > 0 && layers->toInt() > 1)
    return fail(
        "dropout between layers in training mode is random: not compiled");
  auto input_sizes = StaticSizes(n->input(0));
  auto input_type = n->input(0)->type()->cast<c10::TensorType>();
  if (!input_sizes || input_sizes->size() != 3 || !input_type)
    return fail("a batched 3-D input of static shape expected");
  std::vector<Value*> params = ListElements(n->input(2));
  const int64_t num_layers = layers->toInt();
  const size_t per_layer = has_biases->toBool() ? 4 : 2;
  if (params.size() != per_layer * static_cast<size_t>(num_layers))
    return fail(
        "one weight set per layer expected (proj_size is not compiled)");
  Value* h0_all = n->input(1);
  Value* c0_all = nullptr;
  if (kind == CellKind::kLstm) {
    std::vector<Value*> hx = ListElements(n->input(1));
    if (hx.size() != 2) return fail("an [h_0, c_0] list expected");
    h0_all = hx[0];
    c0_all = hx[1];
  }
  auto h0_sizes = StaticSizes(h0_all);
  if (!h0_sizes || h0_sizes->size() != 3)
    return fail("an initial state of static shape expected");
  const bool first = batch_first->toBool();
  const int64_t steps = (*input_sizes)[first ? 1 : 0],
                batch = (*input_sizes)[first ? 0 : 1];
  const int64_t hidden = (*h0_sizes)[2];
  const int64_t time_dim = first ? 1 : 0;
  Builder b{g, input_type};

  std::vector<Value*> xs;  // the layer's inputs, one [B, F] per step
  for (int64_t t = 0; t < steps; ++t)
    xs.push_back(b.Select(n->input(0), time_dim, t, *input_sizes));
  std::vector<Value*> last_h, last_c;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    Value** w = params.data() + layer * per_layer;
    Value* b_ih = has_biases->toBool() ? w[2] : nullptr;
    Value* b_hh = has_biases->toBool() ? w[3] : nullptr;
    State state{b.Select(h0_all, 0, layer, *h0_sizes)};
    if (c0_all != nullptr) state.c = b.Select(c0_all, 0, layer, *h0_sizes);
    for (Value*& x : xs) {
      state = Step(b, kind, x, state, w[0], w[1], b_ih, b_hh, batch, hidden);
      x = state.h;  // the next layer's input at this step
    }
    last_h.push_back(state.h);
    last_c.push_back(state.c);
  }
  std::vector<Value*> outs = {b.Stack(xs, time_dim, batch, hidden),
                              b.Stack(last_h, 0, batch, hidden)};
  if (kind == CellKind::kLstm)
    outs.push_back(b.Stack(last_c, 0, batch, hidden));
  for (Value* v : outs) {
    if (v == nullptr) return {};
  }
  return outs;
}

}  // namespace

const MultiRewriteTable& RecurrentMultiRewrites() {
  static const auto* rewrites = new MultiRewriteTable{
      {"aten::rnn_tanh",
       [](Graph& g, Node* n) { return Recurrent(g, n, CellKind::kTanh); }},
      {"aten::rnn_relu",
       [](Graph& g, Node* n) { return Recurrent(g, n, CellKind::kRelu); }},
      {"aten::gru",
       [](Graph& g, Node* n) { return Recurrent(g, n, CellKind::kGru); }},
      {"aten::lstm",
       [](Graph& g, Node* n) { return Recurrent(g, n, CellKind::kLstm); }},
  };
  return *rewrites;
}

}  // namespace metafuse::compiler::decompose_internal
