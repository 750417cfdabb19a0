#include "compiler/autodiff/inner_loop.h"
#include "compiler/ir/ir_helpers.h"

#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "compiler/autodiff/autodiff.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Symbol;
using torch::jit::Value;

// One metafuse::adam node (three outputs), inputs in schema order.
Node* AdamNode(Graph& g, Value* grad, Value* mu, Value* nu, Value* param,
               int64_t count, const OptimizerSpec& o, bool decoupled) {
  Node* node = g.create(Symbol::fromQualString("metafuse::adam"),
                        {grad, mu, nu, param, g.insertConstant(count),
                         g.insertConstant(o.lr), g.insertConstant(o.b1),
                         g.insertConstant(o.b2), g.insertConstant(o.eps),
                         g.insertConstant(o.eps_root),
                         g.insertConstant(o.weight_decay),
                         g.insertConstant(decoupled),
                         g.insertConstant(o.maximize)},
                        3);
  for (Value* out : node->outputs()) out->setType(c10::TensorType::get());
  g.insertNode(node);
  TORCH_CHECK(node->maybeSchema() != nullptr,
              "metafuse::adam is not registered: is the kernels library linked?");
  return node;
}

}  // namespace

Value* AppendSgdStep(Graph& g, Value* p, Value* grad, const OptimizerSpec& o, Value* lr) {
  // p - lr * (+-g + wd p), written in primitives (a tensor lr stays
  // differentiable).
  Value* d = o.maximize ? InsertOp(g, "aten::neg", {grad}) : grad;
  if (o.weight_decay != 0.0) {
    d = InsertOp(g, "aten::add",
                 {d, InsertOp(g, "aten::mul", {p, g.insertConstant(o.weight_decay)})});
  }
  Value* step = InsertOp(g, "aten::mul", {d, lr != nullptr ? lr : g.insertConstant(o.lr)});
  return InsertOp(g, "aten::sub", {p, step});
}

void CleanUp(std::shared_ptr<Graph> graph) {
  torch::jit::EliminateDeadCode(graph);
  torch::jit::EliminateCommonSubexpression(graph);
  // Immutable types only: tensor constants are references to the caller's
  // tensors (e.g. BatchNorm running statistics reached through a module),
  // and folding them would freeze values that may later change in place.
  torch::jit::ConstantPropagationImmutableTypes(graph);
  torch::jit::EliminateDeadCode(graph);
}

std::shared_ptr<Graph> BuildInnerLoopProgram(const Graph& loss_graph,
                                             const InnerLoopLayout& layout,
                                             const OptimizerSpec& o,
                                             StageLog* log) {
  const int64_t n_in = layout.num_params + layout.num_batch + layout.num_extra;
  TORCH_CHECK(static_cast<int64_t>(loss_graph.inputs().size()) == n_in,
              "loss graph has ", loss_graph.inputs().size(), " inputs, expected ",
              n_in);
  TORCH_CHECK(loss_graph.outputs().size() == 1,
              "the loss graph must return exactly one value");
  TORCH_CHECK(o.kind == "sgd" || o.kind == "adam" || o.kind == "adamw",
              "unsupported optimizer '", o.kind, "'");
  TORCH_CHECK(!o.lr_is_input || o.kind == "sgd",
              "a tensor learning rate is compiled for sgd only");
  TORCH_CHECK(o.momentum == 0.0,
              "sgd with momentum is compiled as a loop only (inner_loop_body.h)");
  auto program = std::make_shared<Graph>();
  std::vector<Value*> params, fixed;
  for (int64_t i = 0; i < n_in; ++i) {
    Value* in = program->addInput();
    in->setType(loss_graph.inputs()[i]->type());
    (i < layout.num_params ? params : fixed).push_back(in);
  }
  std::vector<Value*> lr_inputs;  // one shared, or one per parameter
  if (o.lr_is_input) {
    const int64_t count = o.lr_per_param ? layout.num_params : 1;
    for (int64_t i = 0; i < count; ++i) {
      lr_inputs.push_back(program->addInput("lr"));
      lr_inputs.back()->setType(c10::TensorType::get());
    }
  }
  torch::jit::WithInsertPoint guard(program->return_node());
  std::vector<Value*> mu, nu, losses;
  const bool adam = o.kind != "sgd";
  if (adam) {
    for (Value* p : params) {
      mu.push_back(InsertOp(*program, "aten::zeros_like", {p}));
      nu.push_back(InsertOp(*program, "aten::zeros_like", {p}));
    }
  }
  for (int64_t step = 0; step < layout.steps; ++step) {
    std::vector<Value*> call_inputs = params;
    call_inputs.insert(call_inputs.end(), fixed.begin(), fixed.end());
    Value* loss = torch::jit::insertGraph(*program, const_cast<Graph&>(loss_graph),
                                          call_inputs)[0];
    losses.push_back(loss);
    Value* seed = InsertOp(*program, "aten::ones_like", {loss});
    std::vector<Value*> grads = AppendVjp(*program, {loss}, {seed}, params);
    torch::jit::WithInsertPoint at_end(program->return_node());
    for (size_t i = 0; i < params.size(); ++i) {
      Value* p = params[i];
      if (adam) {
        Node* node = AdamNode(*program, grads[i], mu[i], nu[i], p, step + 1, o,
                              o.kind == "adamw");
        params[i] = InsertOp(*program, "aten::add", {p, node->output(0)});
        mu[i] = node->output(1);
        nu[i] = node->output(2);
        continue;
      }
      params[i] = AppendSgdStep(*program, p, grads[i], o,
                                lr_inputs.empty() ? nullptr : lr_inputs[o.lr_per_param ? i : 0]);
    }
  }
  for (Value* p : params) program->registerOutput(p);
  if (layout.return_losses) {
    for (Value* l : losses) program->registerOutput(l);
  }
  if (log) log->Record("unrolled", *program);
  CleanUp(program);
  if (log) log->Record("unrolled_cleaned", *program);
  return program;
}

SplitProgram BuildMetaBackward(const std::shared_ptr<Graph>& program,
                               const std::vector<int64_t>& differentiable_inputs,
                               StageLog* log) {
  // 1. Append the meta-backward to a copy of the forward program.
  std::shared_ptr<Graph> combined = program->copy();
  const size_t num_outputs = combined->outputs().size();
  std::unordered_set<const Node*> forward_nodes;
  for (Node* n : combined->nodes()) forward_nodes.insert(n);
  std::vector<Value*> outputs(combined->outputs().begin(), combined->outputs().end());
  std::vector<Value*> seeds;
  for (size_t i = 0; i < num_outputs; ++i) {
    Value* seed = combined->addInput("cotangent");
    seed->setType(c10::TensorType::get());
    seeds.push_back(seed);
  }
  std::vector<Value*> wrt;
  for (int64_t i : differentiable_inputs) wrt.push_back(combined->inputs()[i]);
  std::vector<Value*> grads = AppendVjp(*combined, outputs, seeds, wrt);
  for (Value* g : grads) combined->registerOutput(g);
  if (log) log->Record("meta_backward_combined", *combined);

  // 2. Values the backward nodes read from the forward side: saved.
  std::vector<Value*> saved;
  std::unordered_set<const Value*> saved_set;
  auto consider = [&](Value* v) {
    const bool from_forward =
        v->node()->kind() == torch::jit::prim::Param
            ? v->offset() < program->inputs().size()
            : forward_nodes.count(v->node()) > 0;
    if (from_forward && v->node()->kind() != torch::jit::prim::Constant &&
        saved_set.insert(v).second) {
      saved.push_back(v);
    }
  };
  for (Node* n : combined->nodes()) {
    if (forward_nodes.count(n)) continue;
    for (Value* in : n->inputs()) consider(in);
  }
  for (Value* g : grads) consider(g);

  // 3. Backward graph: (saved..., cotangents...) -> grads.
  SplitProgram split;
  split.backward = std::make_shared<Graph>();
  std::unordered_map<Value*, Value*> map;
  for (Value* s : saved) {
    Value* in = split.backward->addInput();
    in->setType(s->type());
    map[s] = in;
  }
  for (Value* seed : seeds) {
    Value* in = split.backward->addInput("cotangent");
    in->setType(seed->type());
    map[seed] = in;
  }
  auto lookup = [&](Value* v) -> Value* {
    auto it = map.find(v);
    if (it != map.end()) return it->second;
    // Forward constants are re-created in the backward graph.
    TORCH_CHECK(v->node()->kind() == torch::jit::prim::Constant,
                "metafuse compiler: backward reads an unsaved forward value");
    Node* c = split.backward->createClone(v->node(), [](Value* x) { return x; });
    split.backward->insertNode(c);
    map[v] = c->output();
    return c->output();
  };
  for (Node* n : combined->nodes()) {
    if (forward_nodes.count(n)) continue;
    Node* clone = split.backward->createClone(n, lookup);
    split.backward->insertNode(clone);
    for (size_t i = 0; i < n->outputs().size(); ++i) map[n->output(i)] = clone->output(i);
  }
  for (Value* g : grads) split.backward->registerOutput(lookup(g));
  CleanUp(split.backward);

  // 4. Forward graph: the program, also returning the saved values.
  split.forward = program->copy();
  std::unordered_map<const Value*, Value*> to_forward;
  {
    auto c_nodes = combined->nodes().begin();
    auto f_nodes = split.forward->nodes().begin();
    for (; f_nodes != split.forward->nodes().end(); ++c_nodes, ++f_nodes) {
      for (size_t i = 0; i < (*f_nodes)->outputs().size(); ++i) {
        to_forward[(*c_nodes)->output(i)] = (*f_nodes)->output(i);
      }
    }
    for (size_t i = 0; i < program->inputs().size(); ++i) {
      to_forward[combined->inputs()[i]] = split.forward->inputs()[i];
    }
  }
  for (Value* s : saved) split.forward->registerOutput(to_forward.at(s));
  split.num_outputs = static_cast<int64_t>(num_outputs);
  split.num_saved = static_cast<int64_t>(saved.size());
  split.differentiable_inputs = differentiable_inputs;
  if (log) {
    log->Record("forward_program", *split.forward);
    log->Record("backward_program", *split.backward);
  }
  return split;
}

}  // namespace metafuse::compiler
