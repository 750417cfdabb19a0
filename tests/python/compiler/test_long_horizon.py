"""Long inner loops (docs/long_horizon.md): the step compiled once and run
as a loop, checked against the unrolled program (same bits for SGD, 1e-12
for Adam's different but exact backward), a hand-written float64 reference,
and the checkpointed runs against the fully stored one (torch.equal); the
schedule's recomputation counted; memory bounded; bad arguments refused."""

import gc
import math
import warnings

import pytest
import torch

import metafuse as mf
from metafuse import _C
from metafuse.compiler import CompilationFallbackWarning

D = torch.float64


@pytest.fixture(autouse=True)
def fused_programs(monkeypatch):
    """Every loop here runs its fused (specialized) program: the fusion cost
    check could keep the unfused one for one loop and not for another, and
    the tests compare bits across loops."""
    monkeypatch.setenv("METAFUSE_FUSION_CHECK", "0")


def params(dtype=D, seed=1):
    g = torch.Generator().manual_seed(seed)
    p = {"w1": 0.4 * torch.randn(4, 12, generator=g), "b1": torch.zeros(12),
         "w2": 0.4 * torch.randn(12, 1, generator=g), "b2": torch.zeros(1)}
    return {k: v.to(dtype).requires_grad_() for k, v in p.items()}


def loss_fn(p, x, y):
    h = torch.tanh(x @ p["w1"] + p["b1"])
    return ((h @ p["w2"] + p["b2"] - y) ** 2).mean()


def batch(dtype=D, seed=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 4, generator=g).to(dtype)
    return x, torch.sin(x.sum(1, keepdim=True)), x.flip(0), torch.cos(x.sum(1, keepdim=True))


def meta_gradient(adapt, dtype=D, p=None):
    p = params(dtype) if p is None else p
    x, y, xq, yq = batch(dtype)
    fast = adapt(p, x, y)
    loss_fn(fast, xq, yq).backward()
    return [v.grad.clone() for v in p.values()], {k: v.detach() for k, v in fast.items()}


def assert_equal(a, b):
    for u, v in zip(a, b):
        assert torch.equal(u, v), float((u - v).abs().max())


def reference_adam(p, x, y, lr, steps, b1=0.9, b2=0.999, eps=1e-8):
    """Adam written by hand (torch.optim's rule), differentiable."""
    keys = list(p)
    mu = {k: torch.zeros_like(p[k]) for k in keys}
    nu = {k: torch.zeros_like(p[k]) for k in keys}
    for t in range(1, steps + 1):
        grads = torch.autograd.grad(loss_fn(p, x, y), [p[k] for k in keys], create_graph=True)
        new = {}
        for k, g in zip(keys, grads):
            mu[k] = b1 * mu[k] + (1 - b1) * g
            nu[k] = b2 * nu[k] + (1 - b2) * g * g
            m_hat = mu[k] / (1 - b1 ** t)
            v_hat = nu[k] / (1 - b2 ** t)
            new[k] = p[k] - lr * m_hat / (v_hat.sqrt() + eps)
        p = new
    return p


def reference_sgd(p, x, y, lr, steps):
    for _ in range(steps):
        grads = torch.autograd.grad(loss_fn(p, x, y), list(p.values()), create_graph=True)
        p = {k: v - lr * g for (k, v), g in zip(p.items(), grads)}
    return p


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_looped_matches_unrolled_and_a_hand_written_reference(kind, fusion):
    steps = 12
    tx = mf.sgd(0.1) if kind == "sgd" else mf.adam(0.02)
    grads = {}
    for name, unroll in (("unrolled", True), ("looped", False)):
        adapt = mf.compile_inner_loop(loss_fn, tx, steps=steps, unroll=unroll)
        adapt(params(), *batch()[:2])
        for program in adapt.programs():
            program.set_fusion(fusion)
        grads[name], fast = meta_gradient(adapt)
        assert adapt.looped == (not unroll)
    x, y, xq, yq = batch()
    p = params()
    ref = (reference_sgd(p, x, y, 0.1, steps) if kind == "sgd"
           else reference_adam(p, x, y, 0.02, steps))
    loss_fn(ref, xq, yq).backward()
    for g, r in zip(grads["looped"], [v.grad for v in p.values()]):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)
    if kind == "sgd":  # the same primitives in the same order: the same bits
        assert_equal(grads["looped"], grads["unrolled"])
    else:  # the unrolled program's Adam node has its closed-form backward
        for a, b in zip(grads["looped"], grads["unrolled"]):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("memory", ["auto", 20_000, 1 << 30])
@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_checkpointed_meta_gradient_has_the_stored_bits(kind, memory):
    tx = {"sgd": mf.sgd(0.1, momentum=0.0), "adam": mf.adam(0.02),
          "adamw": mf.adamw(0.02, weight_decay=0.1)}[kind]
    stored = mf.compile_inner_loop(loss_fn, tx, steps=40, unroll=False)
    checkpointed = mf.compile_inner_loop(loss_fn, tx, steps=40, memory=memory)
    g_stored, fast_stored = meta_gradient(stored)
    g_ckpt, fast_ckpt = meta_gradient(checkpointed)
    assert_equal(g_ckpt, g_stored)
    assert_equal(list(fast_ckpt.values()), list(fast_stored.values()))
    schedule = checkpointed.schedule()
    assert stored.schedule()["store_all"]
    if memory == 1 << 30:  # everything fits: nothing recomputed
        assert schedule["store_all"] and schedule["recomputed_steps"] == 0
        return
    assert not schedule["store_all"]
    assert schedule["recomputed_steps"] == schedule["planned_recomputed_steps"] > 40
    if memory != "auto":
        assert schedule["kept_bytes"] <= memory
    assert schedule["kept_bytes"] < stored.schedule()["kept_bytes"] / 3
    assert f"{schedule['snapshots']} snapshots" in schedule["description"]


def test_learned_rates_extras_and_losses_through_a_checkpointed_loop():
    """Per-parameter learning-rate tensors and a closed-over tensor get
    their meta-gradients, and the inner losses' cotangents reach the
    params, the same bits stored or checkpointed; against float64 autograd."""
    scale = torch.tensor(1.5, dtype=D, requires_grad=True)

    def scaled_loss(p, x, y):
        return scale * loss_fn(p, x, y)

    x, y, xq, yq = batch()
    results = []
    for memory in (None, "auto"):
        rates = {k: torch.full((), 0.05, dtype=D, requires_grad=True) for k in params()}
        adapt = mf.compile_inner_loop(scaled_loss, mf.sgd(rates), steps=30, memory=memory,
                                      unroll=False, return_losses=True)
        p = params()
        fast, losses = adapt(p, x, y)
        assert losses.shape == (30,)
        (loss_fn(fast, xq, yq) + 0.1 * losses.sum()).backward()
        results.append([v.grad.clone() for v in p.values()] + [r.grad.clone() for r in
                                                                 rates.values()]
                       + [scale.grad.clone()])
        scale.grad = None
    assert_equal(results[1], results[0])
    # float64 reference by autograd
    rates = {k: torch.full((), 0.05, dtype=D, requires_grad=True) for k in params()}
    p = params()
    q, losses = dict(p), []
    for _ in range(30):
        loss = scaled_loss(q, x, y)
        losses.append(loss)
        grads = torch.autograd.grad(loss, list(q.values()), create_graph=True)
        q = {k: v - rates[k] * g for (k, v), g in zip(q.items(), grads)}
    (loss_fn(q, xq, yq) + 0.1 * torch.stack(losses).sum()).backward()
    expected = [v.grad for v in p.values()] + [r.grad for r in rates.values()] + [scale.grad]
    for a, b in zip(results[0], expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_program_size_does_not_grow_with_steps():
    sizes = []
    for steps in (20, 2000):
        adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.01), steps=steps, memory="auto")
        meta_gradient(adapt, p=params())
        (program,) = adapt.programs()
        sizes.append((program.forward_instructions, program.backward_instructions))
        stages = dict(program.stages())
        assert "loop_body" in stages and "unrolled" not in stages
    assert sizes[0] == sizes[1]
    unrolled = mf.compile_inner_loop(loss_fn, mf.adam(0.01), steps=20, unroll=True)
    meta_gradient(unrolled, p=params())
    assert unrolled.programs()[0].forward_instructions > 5 * sizes[0][0]


def test_ten_thousand_steps_run_checkpointed_in_bounded_memory():
    core = _C._compiler
    core.install_memory_meter()
    peaks = {}
    for steps in (100, 10_000):
        adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=steps, memory="auto")
        p = params(torch.float32)
        x, y, xq, yq = batch(torch.float32)
        gc.collect()
        base = core.memory_stats()["live_bytes"]
        core.reset_peak_memory()
        fast = adapt(p, x, y)
        loss_fn(fast, xq, yq).backward()
        peaks[steps] = core.memory_stats()["peak_bytes"] - base
        assert all(torch.isfinite(v.grad).all() for v in p.values())
        schedule = adapt.schedule()
        assert schedule["snapshots"] == 140 if steps == 10_000 else True
        assert schedule["recomputed_steps"] <= 2 * steps
    # 100x the steps, about sqrt(100) = 10x the memory (not 100x)
    assert peaks[10_000] < 20 * peaks[100], peaks


def test_profile_shows_recomputation():
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=30, memory="auto")
    result = mf.profile(adapt, params(), *batch()[:2], quiet=True)
    assert "recompute/forward" in result.summary
    assert "recompute/forward" not in mf.profile(
        mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=30, unroll=False), params(),
        *batch()[:2], quiet=True).summary


def test_program_value_keeps_the_loop_and_an_artifact_runs_it(tmp_path):
    """The program value of a looped loop is its body with the loop section:
    the dump shows the loop and its memory setting, and an artifact saved
    with metafuse.aot loads and gives the live program's bits."""
    adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.01), steps=50, memory="auto",
                                  return_losses=True)
    live_grads, _ = meta_gradient(lambda p, x, y: adapt(p, x, y)[0])
    value = adapt.program(params(), *batch()[:2])
    assert value.loop_steps == 50
    text = value.dump()
    assert "loop: 50 steps of the body below; memory auto (binomial checkpointing, 9 snapshots)" \
        in text
    assert "results 4 and losses" in text
    path = str(tmp_path / "loop.mfa")
    mf.aot.save(adapt, path, params(), *batch()[:2])
    loaded = mf.aot.load(path)
    p = params()
    x, y, xq, yq = batch()
    fast, losses = loaded(p, x, y)
    assert losses.shape == (50,)
    loss_fn(fast, xq, yq).backward()
    assert_equal([v.grad for v in p.values()], live_grads)


def test_second_backward_and_create_graph():
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=25, memory="auto")
    p = params()
    x, y, xq, yq = batch()
    meta = loss_fn(adapt(p, x, y), xq, yq)
    meta.backward(retain_graph=True)
    first = [v.grad.clone() for v in p.values()]
    meta.backward()
    for a, v in zip(first, p.values()):
        assert torch.equal(v.grad, 2 * a)
    with pytest.raises(RuntimeError, match="second time"):
        meta.backward()
    meta = loss_fn(adapt(p, x, y), xq, yq)
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.autograd.grad(meta, list(p.values()), create_graph=True)


def test_dead_unit_gradient_is_finite_with_eps_root():
    """A unit whose gradient is exactly zero (its weights and bias zero
    feeding a ReLU at -1): with eps_root > 0 the looped Adam's meta-gradient
    is finite and equals the unrolled program's."""
    def relu_loss(p, x, y):
        return ((torch.relu(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2).mean()
    p = params()
    with torch.no_grad():
        p["w1"][:, 0] = 0.0
        p["b1"][0] = -1.0
    grads = []
    for unroll in (True, False):
        q = {k: v.detach().clone().requires_grad_() for k, v in p.items()}
        adapt = mf.compile_inner_loop(relu_loss, mf.adam(0.1, eps_root=1e-8), steps=3,
                                      unroll=unroll)
        x, y, xq, yq = batch()
        relu_loss(adapt(q, x, y), xq, yq).backward()
        grads.append([v.grad for v in q.values()])
    for a, b in zip(*grads):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(ValueError, match="`memory` must be None"):
        mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=5, memory=-3)
    with pytest.raises(ValueError, match="`memory` must be None"):
        mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=5, memory="lots")
    with pytest.raises(ValueError, match="unroll=True keeps every step"):
        mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=5, memory="auto", unroll=True)
    with pytest.raises(ValueError, match="`unroll` must be"):
        mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=5, unroll="yes")
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=30, memory=100)
    with pytest.raises(RuntimeError, match=r"`memory` of 100 bytes cannot hold one snapshot"):
        adapt(params(), *batch()[:2])


def test_default_unrolls_short_loops_only():
    assert not mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=16).looped
    assert mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=17).looped
    assert mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=3, memory="auto").looped
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=40)
        meta_gradient(adapt)  # compiled, not a fallback
    assert adapt.compile_count == 1 and adapt.schedule()["store_all"]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_batched_looped_loop_matches_the_tasks_one_by_one(kind):
    """adapt.batched of a looped loop: one loop over every task's copy of
    the params; per-task results and the summed meta-gradient match the
    tasks run one at a time (float64), and checkpointing keeps the bits."""
    tx = mf.sgd(0.1) if kind == "sgd" else mf.adam(0.02)
    g = torch.Generator().manual_seed(5)
    tasks = 3
    xs = torch.randn(tasks, 16, 4, generator=g, dtype=D)
    ys = torch.sin(xs.sum(-1, keepdim=True))
    xq, yq = xs.flip(1), torch.cos(xs.sum(-1, keepdim=True))
    results = {}
    for memory in (None, "auto"):
        adapt = mf.compile_inner_loop(loss_fn, tx, steps=24, memory=memory, unroll=False)
        p = params()
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationFallbackWarning)
            fast = adapt.batched(p, xs, ys)
        assert fast["w1"].shape == (tasks, 4, 12)
        sum(loss_fn({k: v[t] for k, v in fast.items()}, xq[t], yq[t])
            for t in range(tasks)).backward()
        results[memory] = ([v.grad.clone() for v in p.values()],
                           [v.detach() for v in fast.values()])
    assert_equal(results["auto"][0], results[None][0])
    assert_equal(results["auto"][1], results[None][1])
    one_by_one = mf.compile_inner_loop(loss_fn, tx, steps=24, unroll=False)
    p = params()
    total = 0
    adapted = []
    for t in range(tasks):
        fast = one_by_one(p, xs[t], ys[t])
        adapted.append(fast)
        total = total + loss_fn(fast, xq[t], yq[t])
    total.backward()
    for a, b in zip(results[None][0], [v.grad for v in p.values()]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for t in range(tasks):
        for k, v in enumerate(adapted[t].values()):
            torch.testing.assert_close(results[None][1][k][t], v.detach(), rtol=1e-10,
                                       atol=1e-12)
    with pytest.raises(ValueError, match="`return_losses` is not supported by batched"):
        mf.compile_inner_loop(loss_fn, tx, steps=24, unroll=False,
                              return_losses=True).batched(params(), xs, ys)


def reference_sgd_momentum(p, x, y, lr, steps, momentum, dampening, nesterov):
    """torch.optim.SGD's momentum rule written by hand, differentiable."""
    keys = list(p)
    buf = {}
    for _ in range(steps):
        grads = torch.autograd.grad(loss_fn(p, x, y), [p[k] for k in keys], create_graph=True)
        new = {}
        for k, g in zip(keys, grads):
            buf[k] = g if k not in buf else momentum * buf[k] + (1 - dampening) * g
            d = g + momentum * buf[k] if nesterov else buf[k]
            new[k] = p[k] - lr * d
        p = new
    return p


@pytest.mark.parametrize("nesterov,dampening", [(False, 0.0), (False, 0.3), (True, 0.0)])
def test_sgd_with_momentum_is_compiled_as_a_loop(nesterov, dampening):
    tx = mf.sgd(0.05, momentum=0.9, dampening=dampening, nesterov=nesterov)
    x, y, xq, yq = batch()
    p = params()
    ref = reference_sgd_momentum(p, x, y, 0.05, 30, 0.9, dampening, nesterov)
    loss_fn(ref, xq, yq).backward()
    results = []
    for memory in (None, "auto"):
        adapt = mf.compile_inner_loop(loss_fn, tx, steps=30, memory=memory, unroll=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompilationFallbackWarning)
            results.append(meta_gradient(adapt)[0])
    assert_equal(results[1], results[0])
    for a, b in zip(results[0], [v.grad for v in p.values()]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    unrolled = mf.compile_inner_loop(loss_fn, tx, steps=5, unroll=True)
    with pytest.warns(CompilationFallbackWarning, match="momentum is compiled as a loop only"):
        meta_gradient(unrolled)


def test_the_long_horizon_example_learns_its_rates():
    """examples/long_horizon_hyperparameters.py, shortened: the per-layer
    rates learned through a checkpointed loop lower the validation loss."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                        "long_horizon_hyperparameters.py")
    spec = importlib.util.spec_from_file_location("long_horizon_hyperparameters", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    history = example.main(steps=100, meta_steps=8, meta_lr=0.2, verbose=False)
    assert history[-1][0] < 0.95 * history[0][0], history
    assert all(math.isfinite(v) for loss, rates in history for v in [loss] + rates)


@pytest.mark.parametrize("unroll_steps", [1, 2])
def test_adam_derivative_at_an_exact_zero_gradient_is_exact(unroll_steps):
    """The looped Adam at a gradient that is exactly 0 (eps_root 0): one
    step is u(g) = -lr g / (|g| + eps), so d u / d g = -lr eps / (|g| + eps)^2,
    -lr / eps at g = 0 (not NaN); a second step keeps it finite. Checked
    against the formula and central finite differences in float64."""
    lr, eps = 0.1, 1e-8
    c = torch.tensor([0.0, 1e-3, -2.0], dtype=D, requires_grad=True)

    def linear_loss(p, x):
        return (p["w"] * c).sum() + 0 * x.sum()

    adapt = mf.compile_inner_loop(linear_loss, mf.adam(lr, eps=eps), steps=unroll_steps,
                                  unroll=False)
    p = {"w": torch.zeros(3, dtype=D, requires_grad=True)}
    x = torch.zeros(1, dtype=D)
    adapt(p, x)["w"].sum().backward()
    assert torch.isfinite(c.grad).all(), c.grad
    if unroll_steps == 1:
        expected = -lr * eps / (c.detach().abs() + eps) ** 2
        # (at g = -2 the derivative, 2.5e-10, is a difference of terms near
        # lr / |g|: float64 rounding leaves about 1e-18 absolute)
        torch.testing.assert_close(c.grad, expected, rtol=1e-9, atol=1e-16)
    h = 1e-6  # central differences beside the kink at 0
    for i in (1,):
        def final(ci):
            cc = c.detach().clone()
            cc[i] = ci
            w = torch.zeros(3, dtype=D)
            mu = nu = torch.zeros(3, dtype=D)
            for t in range(1, unroll_steps + 1):
                mu = 0.9 * mu + 0.1 * cc
                nu = 0.999 * nu + 0.001 * cc * cc
                w = w - lr * (mu / (1 - 0.9 ** t)) / ((nu / (1 - 0.999 ** t)).sqrt() + eps)
            return float(w[i])
        ci = float(c.detach()[i])
        fd = (final(ci + h * abs(ci)) - final(ci - h * abs(ci))) / (2 * h * abs(ci))
        assert abs(float(c.grad[i]) - fd) <= 1e-5 * abs(fd) + 1e-12, (i, float(c.grad[i]), fd)
