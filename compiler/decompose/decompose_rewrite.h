// What the decomposition pass (decompose.h) is written with: the rewrite
// signature, the tables of rewrites by op name (one file per family of ops:
// decompose_core_ops.cc for layers, activations and shapes,
// decompose_losses.cc,
// decompose_normalization.cc, decompose_indexing.cc, decompose_recurrent.cc,
// decompose_einsum.cc, decompose_attention.cc) and the building blocks they
// share (decompose_helpers.cc); decompose.cc is the pass driver. Every
// rewrite emits primitive ops only (primitives.h): the pass does not
// decompose what a rewrite inserts.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace metafuse::compiler::decompose_internal {

// A rewrite inserts the replacement at the graph's insert point and returns
// it, or returns nullptr (through Reject, with the reason) when the node's
// arguments are outside what it supports.
using Rewrite =
    std::function<torch::jit::Value*(torch::jit::Graph&, torch::jit::Node*)>;
using RewriteTable = std::unordered_map<std::string, Rewrite>;
// Multi-output ops: one replacement per output, or empty.
using MultiRewrite = std::function<std::vector<torch::jit::Value*>(
    torch::jit::Graph&, torch::jit::Node*)>;
using MultiRewriteTable = std::unordered_map<std::string, MultiRewrite>;

// The tables, by family.
const RewriteTable& Rewrites();               // decompose_core_ops.cc
const MultiRewriteTable& MultiRewrites();     // decompose_core_ops.cc
const RewriteTable& LossRewrites();           // decompose_losses.cc
const RewriteTable& NormalizationRewrites();  // decompose_normalization.cc
const RewriteTable& IndexingRewrites();       // decompose_indexing.cc
const RewriteTable& AttentionRewrites();      // decompose_attention.cc
const MultiRewriteTable& NormalizationMultiRewrites();
const MultiRewriteTable& RecurrentMultiRewrites();  // decompose_recurrent.cc

// Records why a rewrite declined (shown with the op's name); returns nullptr.
// Why the last rewrite declined (appended to the op's name in the report);
// Reject sets it, the pass driver (decompose.cc) reads and clears it.
extern thread_local std::string last_rejection;
torch::jit::Value* Reject(const std::string& why);

c10::optional<c10::IValue> ConstantOf(torch::jit::Value* v);
int64_t TensorRank(torch::jit::Value* v);  // -1 when unknown
bool IsNone(torch::jit::Value* v);
// A constant dtype argument that is already `x`'s scalar type (a no-op cast).
bool IsInputDtype(torch::jit::Value* dtype, torch::jit::Value* x);
// The number of elements of a shape.
int64_t Count(const std::vector<int64_t>& sizes);
// The static sizes of a tensor value, or nullopt.
std::optional<std::vector<int64_t>> StaticSizes(torch::jit::Value* v);

// v with `like`'s tensor type, for an elementwise result of `like`'s shape
// (rules that read their input's rank need it known).
torch::jit::Value* WithTypeOf(torch::jit::Value* v, torch::jit::Value* like);

// v with `like`'s dtype and device and static `sizes` (a result whose shape
// is known where rules read ranks).
torch::jit::Value* WithSizes(torch::jit::Value* v, torch::jit::Value* like,
                             const std::vector<int64_t>& sizes);

// A tensor like x filled with c (no gradient flows to it).
torch::jit::Value* Filled(torch::jit::Graph& g, torch::jit::Value* x, double c);
// where(cmp(x, y), a, b); every branch must be finite (the untaken one gets
// a zero cotangent, and 0 * inf = nan).
torch::jit::Value* Select(torch::jit::Graph& g, const char* cmp,
                          torch::jit::Value* x, torch::jit::Value* y,
                          torch::jit::Value* a, torch::jit::Value* b);
// x - logsumexp(x, [dim], keepdim).
torch::jit::Value* LogSoftmax(torch::jit::Graph& g, torch::jit::Value* x,
                              int64_t dim);
// log(1 + exp(x)), stable, with derivative sigmoid(x) (1/2 at 0).
torch::jit::Value* Softplus(torch::jit::Graph& g, torch::jit::Value* x,
                            int64_t rank);
// (x - mean) / sqrt(mean((x - mean)^2) + eps) over `dims`.
torch::jit::Value* NormalizeOver(torch::jit::Graph& g, torch::jit::Value* x,
                                 const std::vector<int64_t>& dims, double eps);
// x[..., begin:end, ...] along `dim` of a static-shape x: constant_pad_nd
// with negative pads (a copy, not a view; its derivative pads back).
torch::jit::Value* Crop(torch::jit::Graph& g, torch::jit::Value* x, int64_t dim,
                        int64_t begin, int64_t end);
// einsum of one or two operands (decompose_einsum.cc).
torch::jit::Value* Einsum(torch::jit::Graph& g, torch::jit::Node* n);
// The tensors of a list built in the graph (prim::ListConstruct), or empty.
std::vector<torch::jit::Value*> ListElements(torch::jit::Value* list);
// cat(pieces, dim) of static-shape pieces, without a tensor list.
torch::jit::Value* Concatenate(torch::jit::Graph& g,
                               const std::vector<torch::jit::Value*>& pieces,
                               int64_t dim);
// sqrt(s) for s >= 0 whose derivative is 0 where s is 0 (eager's norm and
// std backward mask that point instead of dividing by zero).
torch::jit::Value* SqrtZeroSafe(torch::jit::Graph& g, torch::jit::Value* s);

}  // namespace metafuse::compiler::decompose_internal
