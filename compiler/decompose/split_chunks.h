// Pass: a chunk or split of a tensor, unpacked at once, becomes one crop per
// piece.
//
// Runs on the traced graph, before RemoveTensorMutation. chunk /
// unsafe_chunk / split / unsafe_split / split_with_sizes /
// unsafe_split_with_sizes / unbind of a tensor of static shape followed by its
// prim::ListUnpack: each piece becomes a constant_pad_nd with negative pads
// (decompose_helpers.cc's crop; unbind's squeezed). Why: the pieces are then fresh
// tensors instead of views of their source, so RemoveTensorMutation can make
// the in-place ops on them functional. torch's GRU and LSTM cells (gru_cell,
// lstm_cell, which nn.GRUCell, nn.LSTMCell and the nn.GRU / nn.LSTM layers run)
// chunk their gates and apply sigmoid_, tanh_, add_ and mul_ to the chunks.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace metafuse::compiler {

// Returns the number of chunks and splits rewritten.
int64_t SplitChunksIntoCrops(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
