"""Optimizer-backward elimination (compiler/autodiff/eliminate_optimizer_backward.cc)
under metafuse.compile: a MAML-style function whose inner loop is the
unfused mf.adam / mf.adamw gives the same adapted params and meta-gradients
with the pass on and off (METAFUSE_DISABLE_OPTIMIZER_ELIMINATION=1), both
equal to the function run eagerly (float64, 1e-10), and the stages show the
rewrite: one metafuse::adam node per parameter and step, no generic chain."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

F64 = torch.float64
STEPS = 3
SWITCH = "METAFUSE_DISABLE_OPTIMIZER_ELIMINATION"


def setup():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, 16), torch.nn.Tanh(),
                              torch.nn.Linear(16, 1)).double()
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.linspace(-3, 3, 10, dtype=F64).unsqueeze(1)
    xq = torch.linspace(-2.5, 2.5, 7, dtype=F64).unsqueeze(1)
    return net, params, (x, torch.sin(x)), (xq, torch.sin(xq + 0.3))


def make_inner(net, make_optimizer, with_state=False):
    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    @mf.compile
    def inner(params, x, y):
        tx = make_optimizer()
        state = tx.init(params)
        for _ in range(STEPS):
            grads = mf.grad(loss_fn(params, x, y), params)
            updates, state = tx.update(grads, state, params=params, inplace=False)
            params = mf.apply_updates(params, updates, inplace=False)
        if with_state:  # the moments are results too: used outside the chain
            return params, [t for t in mf.tree.leaves(state) if t.is_floating_point()]
        return params

    return inner, loss_fn


def meta_step(inner, loss_fn, params, support, query):
    out = inner(params, *support)
    fast = out[0] if isinstance(out, tuple) else out
    meta_loss = loss_fn(fast, *query)
    if isinstance(out, tuple):  # the returned moments take part in the loss
        meta_loss = meta_loss + sum((m * m).sum() for m in out[1])
    meta = torch.autograd.grad(meta_loss, list(params.values()))
    return out, meta


def flat(out):
    return mf.tree.leaves(out)


OPTIMIZERS = [
    (lambda: mf.adam(0.01, eps_root=1e-10), "adam"),
    (lambda: mf.adamw(0.01, eps_root=1e-10, weight_decay=0.1), "adamw"),
    (lambda: mf.adam(0.02, betas=(0.8, 0.99), eps_root=1e-10, weight_decay=0.05, maximize=True),
     "adam-coupled-maximize"),
]


@pytest.mark.parametrize("make_optimizer, name", OPTIMIZERS, ids=[n for _, n in OPTIMIZERS])
@pytest.mark.parametrize("with_state", [False, True], ids=["params", "params-and-moments"])
def test_pass_on_and_off_agree_with_each_other_and_eager(monkeypatch, make_optimizer,
                                                         name, with_state):
    net, params, support, query = setup()
    runs = {}
    for disabled in ("1", "0"):
        monkeypatch.setenv(SWITCH, disabled)
        inner, loss_fn = make_inner(net, make_optimizer, with_state)  # a fresh cache
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationFallbackWarning)
            out, meta = meta_step(inner, loss_fn, params, support, query)
        assert inner.compile_count == 1
        program, = inner.programs()
        runs[disabled] = (out, meta, dict(inner.stages()), program)
    eager_out, eager_meta = meta_step(inner.fn, loss_fn, params, support, query)

    for disabled in ("1", "0"):
        out, meta, _, _ = runs[disabled]
        for a, b in zip(flat(out), flat(eager_out)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        for a, b in zip(meta, eager_meta):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(flat(runs["0"][0]) + list(runs["0"][1]),
                    flat(runs["1"][0]) + list(runs["1"][1])):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

    off_stages, on_stages = runs["1"][2], runs["0"][2]
    assert "optimizer backward eliminated" not in off_stages
    assert "optimizer backward eliminated" in on_stages
    rewritten = on_stages["decomposed"]
    assert rewritten.count("metafuse::adam(") == STEPS * len(params)
    assert "aten::sqrt" not in rewritten
    assert off_stages["decomposed"].count("aten::sqrt(") == STEPS * len(params)
    assert "metafuse::adam(" not in off_stages["decomposed"]
    # The closed form is shorter than the generic derivative of the chain.
    assert runs["0"][3].backward_instructions < runs["1"][3].backward_instructions


def test_counts_report_smaller_meta_backward(monkeypatch):
    net, params, support, _ = setup()
    flat_inputs = mf.tree.leaves(params) + list(support)
    counts = {}
    for disabled in ("1", "0"):
        monkeypatch.setenv(SWITCH, disabled)
        inner, _ = make_inner(net, OPTIMIZERS[0][0])
        inner(params, *support)
        program, = inner.programs()
        counts[disabled] = program.counts(flat_inputs)
    off, on = counts["1"], counts["0"]
    assert set(on) == {"forward", "backward"}
    assert on["forward"][0] < off["forward"][0]   # nodes
    assert on["backward"][0] < off["backward"][0]
    assert on["backward"][1] < off["backward"][1]  # flops
    assert off["forward"][1] > 0


def test_sgd_is_not_rewritten(monkeypatch):
    monkeypatch.setenv(SWITCH, "0")
    net, params, support, _ = setup()
    inner, _ = make_inner(net, lambda: mf.sgd(0.05, momentum=0.9))
    inner(params, *support)
    stages = dict(inner.stages())
    assert "optimizer backward eliminated" not in stages
    assert "metafuse::adam" not in stages["decomposed"]
