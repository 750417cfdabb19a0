// Pass: rewrite traced ops into the primitive set (primitives.h).
//
//   linear(x, W, b)        -> mm(x, t(W)) + b           (2-D x; N-D x is
//                             flattened to 2-D and reshaped back)
//   matmul(a, b)           -> mm(a, b)                  (2-D operands)
//   addmm(c, a, b)         -> mm(a, b) + c              (alpha = beta = 1)
//   mse_loss(a, b, r)      -> mean / sum / none of (a - b)^2
//   square(x)              -> x * x
//   log_softmax(x, d)      -> x - logsumexp(x, [d], keepdim)
//   softmax(x, d)          -> exp(log_softmax(x, d))
//   cross_entropy(x, t)    -> mean(-gather(log_softmax(x, 1), 1, t[:, None]))
//   nll_loss(x, t)         -> mean(-gather(x, 1, t[:, None]))
//   dropout(x, p, False)   -> x
//   _convolution / convolution (2-D, NCHW; 1-D, NCL, not transposed)
//                          -> conv2d or conv_transpose2d.input
//   conv1d(x, w, ...)      -> squeeze(conv2d(unsqueeze(x, 2), unsqueeze(w, 2),
//                             stride (1, s), padding (0, p), dilation (1, d)),
//                             2)
//   conv2d(..., padding="valid" | "same")
//                          -> conv2d with int padding (same: stride 1,
//                             symmetric padding only)
//   conv2d(x [C, H, W])    -> squeeze(conv2d(unsqueeze(x, 0)), 0)
//   max_pool2d(x, ...)     -> max_pool2d_with_indices(x, ...)[0]
//   avg_pool2d(x, k, s, p) -> conv2d(x, full([C, 1, kh, kw], 1 / divisor),
//                             stride s, padding p, groups C): NCHW, one
//                             divisor for every window (count_include_pad
//                             or p = 0; ceil_mode only if it adds no window)
//   adaptive_avg_pool2d(x, (1, 1)) -> mean(x, [2, 3], keepdim)
//   adaptive_avg_pool2d(x, (oh, ow)) -> avg_pool2d with k = s = (H/oh, W/ow)
//                             when they divide evenly
//   batch_norm(x, w, b, rm, rv, training, momentum, eps)
//       training (or no running stats):
//                          m = mean(x, dims, keepdim), c = x - m,
//                          v = mean(c * c, dims, keepdim) (biased),
//                          c / sqrt(v + eps) * w + b   (dims: all but 1)
//       eval:              (x - rm) / sqrt(rv + eps) * w + b, the running
//                          statistics as they are (constants or inputs)
//       The compiled program never updates running_mean / running_var /
//       num_batches_tracked: training mode with running statistics warns
//       (TORCH_WARN) that the momentum update is not performed.
//   num_batches_tracked.add_(k) (an in-place add on an integer graph input
//   or constant that nothing else reads: BatchNorm's counter as traced with
//   buffers as inputs) -> dropped, with a warning; every other in-place op
//   stays unsupported (eager fallback).
//   layer_norm(x, shape, w, b, eps)
//                          -> (x - m) / sqrt(v + eps) * w + b, m and v (biased)
//                             over the trailing len(shape) dims
//   softplus(x, beta, t)   -> where(beta x > t, x,
//                                   logsumexp([0, beta x], 0) / beta)
//   log_sigmoid(x)         -> -softplus(-x)
//   max(x)                 -> amax(x, [])
//   min(x)                 -> -amax(-x, [])
//   max.dim / min.dim(x, d, keepdim)
//                          -> (gather(x, d, i), i), i = argmax / argmin
//                             (keepdim: the first maximum, as eager;
//                             squeezed at d unless keepdim)
//   cat(list, d)           -> sum of constant_pad_nd(piece_k) placing each
//                             piece at its offset along d (static sizes)
//   stack(list, d)         -> cat of unsqueeze(piece_k, d)
//   rsqrt(x)               -> ones_like(x) / sqrt(x)
//   activations (the untaken where-branch is always finite; kinks take
//   eager's one-sided derivative):
//     leaky_relu           -> where(x > 0, x, slope x)
//     elu / selu           -> where(x > 0, scale x,
//                                   alpha scale (exp(min(x, 0) s_in) - 1))
//     silu                 -> x sigmoid(x)
//     mish                 -> x tanh(softplus(x))
//     gelu                 -> x/2 (1 + erf(x / sqrt 2)), or the tanh form
//     hardtanh(x, lo, hi)  -> where(x <= lo, lo, where(x >= hi, hi, x))
//     clamp(x, lo, hi)     -> where(x < lo, lo, where(x > hi, hi, x))
//     maximum / minimum / max(a, b) / min(a, b)
//                          -> where(a > b, a, where(a < b, b, (a + b) / 2))
//   relu6, clamp_min / clamp_max, amin, expand_as, x.T, embedding (gather)
// Losses are rewritten by decompose_losses.cc (l1, smooth_l1, huber, nll,
// cross_entropy with smoothing or probabilities, BCE with logits, kl_div),
// normalizations and norms by decompose_normalization.cc (batch, layer,
// group, instance norm and their native_* forms, var, std, vector norms),
// recurrent layers by decompose_recurrent.cc (rnn_tanh, rnn_relu, gru, lstm
// unrolled into cells), indexing by decompose_indexing.cc (index_select,
// index, arange, one_hot, flip, repeat, masked_fill, tril / triu), einsum
// by decompose_einsum.cc;
// decompose_rewrite.h holds what the three files share.
// Returns the names of the ops it could neither keep nor rewrite (empty when
// the whole graph is in the primitive set), each followed by what was
// expected when a rewrite declined, e.g.
//   "aten::avg_pool2d (ceil_mode adds a partial window ...: not compiled)".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

std::vector<std::string> DecomposeToPrimitives(
    const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
