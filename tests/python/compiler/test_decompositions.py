"""Losses, normalizations, norms, indexing, padding and upsampling the
compiler writes in its primitive set (compiler/decompose/decompose_losses.cc,
decompose_normalization.cc, decompose_indexing.cc, decompose.cc):
each compiles without falling back, and its value and gradient equal
eager's in float64 (1e-10); inside metafuse.vmap with an adapt function
the meta-gradient equals the per-task loop. Second-order derivatives of the
same rewrites are checked against autograd by the C++ fuzzer
(tests/cpp/compiler/autodiff_fuzz_test.cc)."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

# Every test here means the compiled path (a fallback to eager would pass the
# gradchecks silently) and runs the fused and the unfused program each.
pytestmark = [pytest.mark.filterwarnings("error::metafuse.compiler.CompilationFallbackWarning"),
              pytest.mark.usefixtures("program")]

from meta_checks import assert_same_losses_and_meta_gradients

F = torch.nn.functional
F64 = torch.float64


def _data():
    g = torch.Generator().manual_seed(3)
    return {
        "x": torch.randn(6, 5, generator=g, dtype=F64),
        "y": torch.randn(6, 5, generator=g, dtype=F64),
        "img": torch.randn(2, 4, 5, 5, generator=g, dtype=F64),
        "labels": torch.randint(0, 5, (6,), generator=g),
        "probs": torch.softmax(torch.randn(6, 5, generator=g, dtype=F64), 1),
        "unit": torch.rand(6, 5, generator=g, dtype=F64),
        "pos_weight": torch.linspace(0.5, 2, 5, dtype=F64),
        "pixel_labels": torch.randint(0, 4, (2, 5, 5), generator=g),
        "seq": torch.randn(2, 3, 4, 5, generator=g, dtype=F64),
        "vec": torch.randn(5, generator=g, dtype=F64),
        # at the kinks and just above 3, where x + 3 rounds to 6
        "hardswish kinks": torch.tensor([-3.0, 3.0, 3.0000000000000004, -4.0], dtype=F64),
    }


D = _data()

# name -> f(W, Wc) with W [5, 5] and Wc [4, 4, 3, 3] the differentiated weights
CASES = {
    "l1_loss": lambda W, Wc: F.l1_loss(D["x"] @ W, D["y"]),
    "smooth_l1_loss": lambda W, Wc: F.smooth_l1_loss(D["x"] @ W, D["y"], beta=0.5),
    "smooth_l1_loss sum": lambda W, Wc: F.smooth_l1_loss(D["x"] @ W, D["y"], beta=0.3,
                                                          reduction="sum"),
    "huber_loss": lambda W, Wc: F.huber_loss(D["x"] @ W, D["y"], delta=0.8),
    "bce_with_logits": lambda W, Wc: F.binary_cross_entropy_with_logits(D["x"] @ W, D["unit"]),
    "bce_with_logits pos_weight": lambda W, Wc: F.binary_cross_entropy_with_logits(
        D["x"] @ W, D["unit"], pos_weight=D["pos_weight"],
        reduction="sum"),
    "nll_loss": lambda W, Wc: F.nll_loss(F.log_softmax(D["x"] @ W, 1), D["labels"]),
    "nll_loss none": lambda W, Wc: F.nll_loss(F.log_softmax(D["x"] @ W, 1), D["labels"],
                                              reduction="none").square().sum(),
    "cross_entropy sum": lambda W, Wc: F.cross_entropy(D["x"] @ W, D["labels"],
                                                       reduction="sum"),
    "cross_entropy label_smoothing": lambda W, Wc: F.cross_entropy(D["x"] @ W, D["labels"],
                                                                   label_smoothing=0.1),
    "cross_entropy probabilities": lambda W, Wc: F.cross_entropy(D["x"] @ W, D["probs"],
                                                                 label_smoothing=0.2),
    "cross_entropy images": lambda W, Wc: F.cross_entropy(
        F.conv2d(D["img"], Wc, padding=1), D["pixel_labels"]),
    "kl_div batchmean": lambda W, Wc: F.kl_div(F.log_softmax(D["x"] @ W, 1), D["probs"],
                                               reduction="batchmean"),
    "kl_div zeros in target": lambda W, Wc: F.kl_div(F.log_softmax(D["x"] @ W, 1),
                                                     torch.relu(D["probs"] - 0.2),
                                                     reduction="sum"),
    "kl_div log_target": lambda W, Wc: F.kl_div(F.log_softmax(D["x"] @ W, 1),
                                                D["probs"].log(), log_target=True,
                                                reduction="batchmean"),
    "group_norm": lambda W, Wc: F.group_norm(F.conv2d(D["img"], Wc, padding=1), 2,
                                             Wc[0, :, 0, 0], Wc[1, :, 0, 0]).square().sum(),
    "instance_norm": lambda W, Wc: F.instance_norm(F.conv2d(D["img"], Wc)).pow(3).sum(),
    "layer_norm over 2 dims": lambda W, Wc: F.layer_norm(F.conv2d(D["img"], Wc), (3, 3))
    .pow(3).sum(),
    "var and std": lambda W, Wc: (D["x"] @ W).var(0).sum() + (D["x"] @ W).std(1).sum()
    + (D["x"] @ W).var(unbiased=False),
    "norms": lambda W, Wc: (D["x"] @ W).norm() + torch.linalg.vector_norm(D["x"] @ W, dim=1).sum()
    + torch.linalg.vector_norm(D["x"] @ W, ord=1) + torch.linalg.vector_norm(D["x"] @ W, float("inf")),
    "normalize": lambda W, Wc: (F.normalize(D["x"] @ W) * D["y"]).sum(),
    "relu6 amin clamp_min": lambda W, Wc: F.relu6(4 * D["x"] @ W).sum()
    + (D["x"] @ W).amin(0).sum() + torch.clamp_min(D["x"] @ W, 0.1).sum(),
    "embedding": lambda W, Wc: F.embedding(D["labels"], W).pow(3).sum(),
    "x.T": lambda W, Wc: ((D["x"] @ W).T @ D["y"]).square().sum(),
    "log1p and expm1": lambda W, Wc: torch.log1p((D["x"] @ W).square() * 1e-6).sum() * 1e6
    + torch.expm1(torch.tanh(D["x"] @ W)).sum(),
    "cumsum": lambda W, Wc: ((D["x"] @ W).cumsum(1) * D["y"]).sum()
    + (D["x"] @ W).cumsum(0).square().sum(),
    "pad": lambda W, Wc: F.pad(F.conv2d(D["img"], Wc), (1, 2, 0, 1), value=0.5).pow(3).sum(),
    "pad reflect, replicate, circular": lambda W, Wc: (
        F.pad(F.conv2d(D["img"], Wc), (2, 1, 1, 2), mode="reflect").pow(3).sum()
        + F.pad(F.conv2d(D["img"], Wc), (1, 3, 0, 2), mode="replicate").pow(3).sum()
        + F.pad(F.conv2d(D["img"], Wc), (3, 2, 1, 0), mode="circular").pow(3).sum()
        + F.pad(D["x"] @ W, (2, 3), mode="reflect").sin().sum()),
    "upsample nearest (scale 2, 1.5, sizes, exact)": lambda W, Wc: (
        F.interpolate(F.conv2d(D["img"], Wc), scale_factor=2).pow(3).sum()
        + F.interpolate(F.conv2d(D["img"], Wc), scale_factor=1.5).pow(3).sum()
        + F.interpolate(F.conv2d(D["img"], Wc), size=(5, 7)).sin().sum()
        + F.interpolate(F.conv2d(D["img"], Wc), size=(2, 5), mode="nearest-exact").sin().sum()
        + F.interpolate((D["x"] @ W).unsqueeze(0), scale_factor=2.5).sin().sum()),
    "hardswish": lambda W, Wc: F.hardswish(4 * D["x"] @ W).pow(3).sum()
    + (F.hardswish(D["hardswish kinks"] * W[0, 0]) * D["vec"][:4]).sum(),
    "matmul stack times matrix": lambda W, Wc: (D["seq"] @ W).sin().sum(),
    "matmul broadcast stacks (attention)": lambda W, Wc: (
        torch.softmax((D["seq"] @ W) @ (D["seq"] @ W).transpose(-1, -2), -1) @ D["seq"][:1]
    ).square().sum(),
    "matmul vectors": lambda W, Wc: (D["vec"] @ W @ D["vec"]) + (W @ D["vec"]).square().sum(),
    "detach stops the gradient": lambda W, Wc: ((D["x"] @ W).detach() * (D["x"] @ W).sin()).sum(),
    "Normal log_prob": lambda W, Wc: torch.distributions.Normal(D["x"] @ W, 0.5).log_prob(D["y"])
    .sum(),
    "Categorical log_prob": lambda W, Wc: torch.distributions.Categorical(logits=D["x"] @ W)
    .log_prob(D["labels"]).sum(),
    "rows at an index (repeats accumulate)": lambda W, Wc: (D["x"] @ W)[D["pixel_labels"][0]]
    .pow(3).sum(),
    "one value per row (x[arange(n), a])": lambda W, Wc: (D["x"] @ W)[torch.arange(6), D["labels"]]
    .pow(3).sum(),
    "index_select": lambda W, Wc: torch.index_select(D["x"] @ W, 1, D["labels"]).pow(3).sum(),
    "one_hot": lambda W, Wc: ((D["x"] @ W) * F.one_hot(D["labels"], 5)).pow(3).sum(),
    "flip, repeat, unbind": lambda W, Wc: (D["x"] @ W).flip(0, 1).cumsum(1).sin().sum()
    + (D["x"] @ W).repeat(2, 1, 3).sin().sum() + sum(r.pow(3).sum() for r in (D["x"] @ W).unbind(1)),
    "einsum (attention scores, batched products, outer, sums)": lambda W, Wc: (
        torch.einsum("bhqd,bhkd->bhqk", D["seq"] @ W, D["seq"]).sin().sum()
        + torch.einsum("bij,jk->bik", D["seq"][0], W).square().sum()
        + torch.einsum("i,j->ij", D["vec"] @ W, D["vec"]).sin().sum()
        + torch.einsum("ij->j", W * W).sin().sum() + torch.einsum("ij,ij", W, W)),
    "reciprocal, log2, log10, lerp": lambda W, Wc: ((D["x"] @ W).square() + 1).reciprocal().sum()
    + torch.log2((D["x"] @ W).square() + 1).sum() + torch.log10((D["x"] @ W).square() + 1).sum()
    + torch.lerp(D["x"], D["x"] @ W, 0.3).sin().sum(),
    "clamp by a tensor, floor, round": lambda W, Wc: torch.clamp(D["x"] @ W, min=D["y"]).sin().sum()
    + torch.clamp(D["x"] @ W, max=D["y"]).sin().sum() + ((D["x"] @ W) - (D["x"] @ W).floor()).sum()
    + ((D["x"] @ W).round() * (D["x"] @ W)).sum(),
    "masked_fill, tril, triu, sign": lambda W, Wc: (D["x"] @ W).masked_fill(D["unit"] > 0.5, 2.0)
    .pow(3).sum() + (D["x"] @ W).tril(-1).pow(3).sum() + (D["x"] @ W).triu(1).sin().sum()
    + (torch.sign(D["x"] @ W) * (D["x"] @ W)).sum(),
}


def weights():
    g = torch.Generator().manual_seed(5)
    return (torch.randn(5, 5, generator=g, dtype=F64).requires_grad_(),
            (0.4 * torch.randn(4, 4, 3, 3, generator=g, dtype=F64)).requires_grad_())


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_value_and_gradient_equal_eager(name):
    fn = CASES[name]
    W, Wc = weights()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        compiled = mf.compile(fn, argnums=(0, 1))
        out = compiled(W, Wc)
    expected = fn(W, Wc)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    got = torch.autograd.grad(out, (W, Wc), allow_unused=True)
    want = torch.autograd.grad(expected, (W, Wc), allow_unused=True)
    for g, w in zip(got, want):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["huber_loss", "bce_with_logits pos_weight",
                                  "cross_entropy label_smoothing", "group_norm", "norms",
                                  "pad reflect, replicate, circular",
                                  "upsample nearest (scale 2, 1.5, sizes, exact)"])
def test_gradcheck_of_the_compiled_function(name):
    fn = CASES[name]
    compiled = mf.compile(fn, argnums=(0, 1))
    assert torch.autograd.gradcheck(compiled, weights())


@pytest.mark.parametrize("fn, reason", [
    (lambda W: F.cross_entropy(D["x"] @ W, D["labels"], weight=torch.ones(5, dtype=F64)),
     "class weights are not compiled"),
    (lambda W: F.binary_cross_entropy(torch.sigmoid(D["x"] @ W), D["unit"]),
     "binary_cross_entropy_with_logits is"),
    # aten::smooth_l1_loss itself: torch 2.x's F.smooth_l1_loss turns beta 0
    # into l1_loss before it reaches the tracer
    (lambda W: torch._C._nn.smooth_l1_loss(D["x"] @ W, D["y"], 1, 0.0), "beta > 0 expected"),
    (lambda W: torch.einsum("ii->", W), "repeated within an operand"),
], ids=["class weights", "probabilities", "beta 0", "einsum diagonal"])
def test_a_declined_form_falls_back_naming_the_reason(fn, reason):
    W, _ = weights()
    with pytest.warns(CompilationFallbackWarning, match=reason):
        out = mf.compile(fn)(W)
    torch.testing.assert_close(out, fn(W), rtol=0, atol=0)


def test_multi_head_attention_compiles():
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(5, 1, batch_first=True).to(F64)
    params = {k: v.detach().clone().requires_grad_() for k, v in attention.named_parameters()}
    seq = D["seq"][0]

    def loss(p):
        return mf.functional_call(attention, p, seq, seq, seq, need_weights=False)[0].square().sum()

    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        out = mf.compile(loss)(params)
    assert_same_losses_and_meta_gradients(out, loss(params), params)


@pytest.mark.parametrize("layer", ["layer_norm", "group_norm"])
def test_normalized_nets_compile_inside_vmap(layer):
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(8) if layer == "layer_norm" else torch.nn.GroupNorm(2, 8)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), norm, torch.nn.GELU(),
                              torch.nn.Linear(8, 1)).to(F64)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def loss_fn(p, x, y):
        return F.huber_loss(mf.functional_call(net, p, x), y)

    adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.05, eps_root=1e-10), steps=2)
    g = torch.Generator().manual_seed(2)
    xs, ys, xq, yq = (torch.randn(3, 6, k, generator=g, dtype=F64) for k in (3, 1, 3, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        losses = mf.vmap(lambda p, a, b, c, d: loss_fn(adapt(p, a, b), c, d),
                         in_dims=(None, 0, 0, 0, 0))(params, xs, ys, xq, yq)
    expected = torch.stack([loss_fn(adapt._eager(params, (xs[t], ys[t])), xq[t], yq[t])
                            for t in range(3)])
    assert_same_losses_and_meta_gradients(losses, expected, params)
