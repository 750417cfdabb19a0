"""@metafuse.compile: a user-written inner loop with metafuse's optimizer API
and metafuse.grad, compiled; results and meta-gradients equal running the
same function eagerly (float64, 1e-10)."""

import warnings

import pytest
import torch

import metafuse as mf
from metafuse.compiler import CompilationFallbackWarning

# The fused and the unfused compiled program, each (compiler/conftest.py).
pytestmark = pytest.mark.usefixtures("program")

F64 = torch.float64


def setup():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 12), torch.nn.Tanh(),
                              torch.nn.Linear(12, 12), torch.nn.ReLU(),
                              torch.nn.Linear(12, 1)).double()
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.linspace(-3, 3, 10, dtype=F64).unsqueeze(1)
    return net, params, x, torch.sin(x)


def make_inner(net, make_optimizer, steps=3):
    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)

    @mf.compile
    def inner(params, x, y):
        tx = make_optimizer()
        state = tx.init(params)
        for _ in range(steps):
            grads = mf.grad(loss_fn(params, x, y), params)
            updates, state = tx.update(grads, state, params=params, inplace=False)
            params = mf.apply_updates(params, updates, inplace=False)
        return params

    return inner, loss_fn


@pytest.mark.parametrize("make_optimizer", [
    lambda: mf.sgd(0.05),
    lambda: mf.sgd(0.05, momentum=0.9, weight_decay=0.01),
    lambda: mf.adam(0.01, eps_root=1e-10),
    lambda: mf.adamw(0.01, eps_root=1e-10, weight_decay=0.1),
], ids=["sgd", "sgd-momentum-wd", "adam", "adamw"])
def test_user_loop_matches_eager(make_optimizer):
    net, params, x, y = setup()
    inner, loss_fn = make_inner(net, make_optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        fast = inner(params, x, y)
    eager = inner.fn(params, x, y)
    meta = torch.autograd.grad(loss_fn(fast, x, y), list(params.values()))
    expected = torch.autograd.grad(loss_fn(eager, x, y), list(params.values()))
    for k in fast:
        torch.testing.assert_close(fast[k], eager[k], rtol=1e-10, atol=1e-12)
    for a, b in zip(meta, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert inner.compile_count == 1
    inner(params, x + 1, y)
    assert inner.compile_count == 1  # same guard: no recompilation


def test_state_from_outside_falls_back_instead_of_baking_the_count():
    tx = mf.adam(0.1)

    @mf.compile
    def step(w, state, x):
        g = mf.grad(((w * x) ** 2).sum(), w)
        u, state = tx.update(g, state, inplace=False)
        return mf.apply_updates(w, u, inplace=False), state

    w = torch.tensor([0.5, -1.0], dtype=F64, requires_grad=True)
    x = torch.tensor([1.0, 2.0], dtype=F64)
    with pytest.warns(CompilationFallbackWarning, match="count comes from"):
        w1, s1 = step(w, tx.init(w), x)
    w2, _ = step(w1, s1, x)
    e1, es1 = step.fn(w, tx.init(w), x)
    e2, _ = step.fn(e1, es1, x)
    torch.testing.assert_close(w2, e2)


def test_fused_optimizer_inside_falls_back_with_the_op_named():
    net, params, x, y = setup()
    inner, _ = make_inner(net, lambda: mf.adam(0.01, fused=True), steps=1)
    with pytest.warns(CompilationFallbackWarning, match="adam_multi"):
        fast = inner(params, x, y)
    eager = inner.fn(params, x, y)
    for k in fast:
        torch.testing.assert_close(fast[k], eager[k])


def test_grad_eager_semantics_and_errors():
    w = {"a": torch.tensor([1.0, 2.0], requires_grad=True),
         "b": torch.tensor(3.0, requires_grad=True)}
    g = mf.grad((w["a"] ** 2).sum(), w)
    torch.testing.assert_close(g["a"], torch.tensor([2.0, 4.0]))
    torch.testing.assert_close(g["b"], torch.tensor(0.0))  # unused: zeros
    assert g["a"].requires_grad  # create_graph: differentiable again
    with pytest.raises(TypeError, match="pytree of tensors"):
        mf.grad(w["b"], {"a": 1.0})
    with pytest.raises(RuntimeError, match="does not depend"):
        mf.grad(torch.tensor(1.0), w)
    with pytest.raises(ValueError, match="argnums"):
        mf.compile(argnums=-1)


def test_first_call_under_no_grad_compiles():
    # metafuse.grad runs eagerly while tracing; grad mode must be on then.
    @mf.compile
    def step(w, x):
        return w - 0.1 * mf.grad(((w * x) ** 2).sum(), w)

    w = torch.tensor([0.5, -1.0], dtype=F64)
    x = torch.tensor([1.0, 2.0], dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        with torch.no_grad():
            got = step(w, x)
    torch.testing.assert_close(got, w - 0.2 * x * x * w, rtol=1e-12, atol=0)


def test_indexing_and_slicing_compile():
    """x[t] (aten::select) and x[a:b] (aten::slice) are crops: compiled, and
    second-order exact."""
    w = torch.tensor([0.5, -1.0, 2.0], dtype=F64, requires_grad=True)
    xs = torch.linspace(-1, 1, 12, dtype=F64).reshape(4, 3)

    def step(w, xs):
        loss = sum(((w * xs[t]) ** 2).sum() for t in range(xs.shape[0]))
        loss = loss + (w * xs[1:3].sum(0)).tanh().sum() + (w[-1] * xs[-1, :2]).sum()
        return w - 0.1 * mf.grad(loss, w)

    compiled = mf.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilationFallbackWarning)
        fast = compiled(w, xs)
    with torch.enable_grad():
        reference = compiled.fn(w, xs)
    torch.testing.assert_close(fast, reference, rtol=1e-12, atol=1e-14)
    meta = torch.autograd.grad((fast ** 2).sum(), w)[0]
    expected = torch.autograd.grad((reference ** 2).sum(), w)[0]
    torch.testing.assert_close(meta, expected, rtol=1e-12, atol=1e-14)


def test_unsupported_op_is_a_runtime_error_subclass_from_the_extension():
    # pybind11's register_exception: the C++ UnsupportedOp arrives as this
    # class, which metafuse.compile catches to fall back.
    from metafuse import _C
    assert issubclass(_C._compiler.UnsupportedOp, RuntimeError)
    assert _C._compiler.UnsupportedOp.__module__.startswith("metafuse")


def test_a_data_argument_that_requires_grad_is_warned_and_stays_data():
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    fn = mf.compile(lambda w, x: (w * x).sum())
    with pytest.warns(UserWarning, match=r"argument 1 of .* argnums is \(0,\)"):
        out = fn(w, x)
    gw, gx = torch.autograd.grad(out, (w, x), allow_unused=True)
    torch.testing.assert_close(gw, x.detach())
    assert gx is None
