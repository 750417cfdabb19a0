"""What the fused optimizer ops mean: torch.optim's numbers over several steps,
the three defects of TorchOpt's published kernel, the multi-tensor form,
reduced-precision dtypes and argument errors."""

import pytest
import torch

import kernels_reference as ref

import metafuse  # noqa: F401  (registers torch.ops.metafuse)

OPS = torch.ops.metafuse
F64 = dict(dtype=torch.float64)

# (op, op options, torch.optim factory, number of state slots, state slots
#  that the options use)
PARITY = [
    ("adam", dict(lr=0.1, b1=0.8, b2=0.9, eps=1e-3, weight_decay=0.1,
                  maximize=True),
     lambda p: torch.optim.Adam([p], lr=0.1, betas=(0.8, 0.9), eps=1e-3,
                                weight_decay=0.1, maximize=True), [1, 1]),
    ("adam", dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True),
     lambda p: torch.optim.AdamW([p], lr=0.1, weight_decay=0.1), [1, 1]),
    ("sgd", dict(lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.1),
     lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.2,
                               weight_decay=0.1), [1]),
    ("sgd", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True),
     lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True,
                               maximize=True), [1]),
    ("sgd", dict(lr=0.1), lambda p: torch.optim.SGD([p], lr=0.1), [0]),
    ("rmsprop", dict(lr=0.01, alpha=0.9, eps=1e-4, weight_decay=0.1,
                     momentum=0.5, centered=True),
     lambda p: torch.optim.RMSprop([p], lr=0.01, alpha=0.9, eps=1e-4,
                                   weight_decay=0.1, momentum=0.5,
                                   centered=True), [1, 1, 1]),
    ("rmsprop", dict(lr=0.01), lambda p: torch.optim.RMSprop([p], lr=0.01),
     [1, 0, 0]),
    ("adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1),
     lambda p: torch.optim.Adagrad([p], lr=0.1, lr_decay=0.05,
                                   weight_decay=0.1), [1]),
    ("adamax", dict(lr=0.05, weight_decay=0.1),
     lambda p: torch.optim.Adamax([p], lr=0.05, weight_decay=0.1), [1, 1]),
    ("adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.1),
     lambda p: torch.optim.Adadelta([p], lr=0.5, rho=0.8, weight_decay=0.1),
     [1, 1]),
    ("radam", dict(lr=0.05, weight_decay=0.1),
     lambda p: torch.optim.RAdam([p], lr=0.05, weight_decay=0.1), [1, 1]),
]
COUNTED = {"adam", "sgd", "adagrad", "adamax", "radam"}


@pytest.mark.parametrize("name, opts, make_optim, used", PARITY,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(PARITY)])
def test_matches_torch_optim_over_steps(name, opts, make_optim, used):
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(23, generator=gen, **F64)
    grads = [torch.randn(23, generator=gen, **F64) for _ in range(8)]
    theirs = p0.clone().requires_grad_()
    optim = make_optim(theirs)
    mine = p0.clone()
    states = [torch.zeros_like(p0) if u else None for u in used]
    for count, g in enumerate(grads, start=1):
        theirs.grad = g.clone()
        optim.step()
        kw = dict(opts, count=count) if name in COUNTED else opts
        update, *states = getattr(OPS, name)(g, *states, mine, **kw)
        mine = mine + update
    torch.testing.assert_close(mine, theirs.detach(), rtol=1e-12, atol=1e-12)


# --- TorchOpt's accelerated Adam kernel: the three cases it gets wrong ------

def _adam_grads(g, mu, nu, impl, **opts):
    xs = [t.clone().requires_grad_() for t in (g, mu, nu)]
    u, m, v = impl(*xs, None, count=3, lr=0.1, **opts)
    w = torch.linspace(-1, 1, u.numel(), **F64)
    loss = (u * w).sum() + (m * w.flip(0)).sum() + (v * w * w).sum()
    return torch.autograd.grad(loss, xs)


def test_adam_backward_exact_with_eps_and_eps_root():
    """TorchOpt's nu-derivative holds only for eps = 0 (~5% off at 1e-3)."""
    gen = torch.Generator().manual_seed(1)
    g, mu = torch.randn(64, generator=gen, **F64), torch.randn(64, generator=gen, **F64)
    nu = torch.rand(64, generator=gen, **F64) * 1e-4
    for eps, eps_root in [(1e-3, 0.0), (1e-3, 1e-6), (1e-1, 1e-3)]:
        mine = _adam_grads(g, mu, nu, OPS.adam, eps=eps, eps_root=eps_root)
        true = _adam_grads(g, mu, nu, ref.adam, eps=eps, eps_root=eps_root)
        for a, b in zip(mine, true):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)


def test_adam_derivative_where_first_moment_is_exactly_zero():
    """mu' = 0 exactly (g = mu = 0): d update / d g = -(lr/bc1)(1-b1)/D != 0."""
    g = torch.zeros(5, **F64)
    mu = torch.zeros(5, **F64)
    nu = torch.full((5,), 0.5, **F64)
    xs = [t.clone().requires_grad_() for t in (g, mu, nu)]
    u, m, _ = OPS.adam(*xs, None, count=2, lr=0.1, eps=1e-3)
    assert torch.equal(m, torch.zeros_like(m))
    grad_g, grad_mu, _ = torch.autograd.grad(u.sum(), xs)
    true = _adam_grads(g, mu, nu, ref.adam, eps=1e-3)
    assert (grad_g != 0).all() and (grad_mu != 0).all()
    xs2 = [t.clone().requires_grad_() for t in (g, mu, nu)]
    ur, _, _ = ref.adam(*xs2, None, count=2, lr=0.1, eps=1e-3)
    for a, b in zip((grad_g, grad_mu), torch.autograd.grad(ur.sum(), xs2)[:2]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=0)
    assert all(torch.isfinite(t).all() for t in true)


@pytest.mark.parametrize("name", ["adam", "radam", "rmsprop", "adagrad"])
def test_no_nan_at_zero_second_moment_with_eps_root(name):
    """g = 0 and a zero second moment: with eps_root > 0 the backward, and the
    backward of the backward, are finite and equal the reference."""
    n = 6
    g, s0, s1, p = (torch.zeros(n, **F64) for _ in range(4))
    opts = dict(eps=1e-8, eps_root=1e-6)
    if name == "adam":
        args, opts = [g, s1, s0], dict(opts, count=2)       # mu = 0, nu = 0
    elif name == "radam":
        args, opts = [g, s1, s0], dict(opts, count=10)
    elif name == "rmsprop":
        args = [g, s0, None, None]
    else:
        args, opts = [g, s0], dict(opts, count=1)
    args[0] = torch.linspace(0, 0, n, **F64)  # exact zeros
    slots = [i for i, a in enumerate(args) if a is not None]

    def run(impl):
        xs = [args[i].clone().requires_grad_() for i in slots]
        full = list(args)
        for i, x in zip(slots, xs):
            full[i] = x
        outs = [o for o in impl(*full, p, **opts) if o is not None]
        loss = sum(o.sum() for o in outs)
        first = torch.autograd.grad(loss, xs, create_graph=True)
        second = torch.autograd.grad(sum((f * f).sum() for f in first), xs,
                                     allow_unused=True)
        return list(first) + [s for s in second if s is not None]

    mine, true = run(getattr(OPS, name)), run(getattr(ref, name))
    for a, b in zip(mine, true):
        assert torch.isfinite(a).all(), a
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-10, atol=1e-12)


# --- multi-tensor form ------------------------------------------------------

SIZES = [0, 1, 3, 1025, 40_001, 7]  # > GRAIN_SIZE: several parallel chunks


def _lists(n_states, dtype=torch.float64, seed=0, sizes=SIZES):
    gen = torch.Generator().manual_seed(seed)
    mk = lambda: [torch.randn(n, generator=gen, dtype=dtype) for n in sizes]  # noqa: E731
    return mk(), [[t.abs() + 0.1 for t in mk()] for _ in range(n_states)], mk()


@pytest.mark.parametrize("name, opts, n_states", [
    ("adam", dict(count=3, lr=0.1, eps_root=1e-8, weight_decay=0.1), 2),
    ("sgd", dict(count=2, lr=0.1, momentum=0.9, nesterov=True), 1),
    ("rmsprop", dict(lr=0.1, momentum=0.9, centered=True), 3),
    ("adagrad", dict(count=2, lr=0.1), 1),
    ("adamax", dict(count=2), 2),
    ("adadelta", dict(weight_decay=0.1), 2),
    ("radam", dict(count=9, decoupled_weight_decay=True, weight_decay=0.1), 2),
])
def test_multi_tensor_equals_per_tensor(name, opts, n_states):
    grads, states, params = _lists(n_states)
    if name == "rmsprop":
        states[0] = [a + b * b for a, b in zip(*states[:2])]  # sq > ga^2
    multi = getattr(OPS, name + "_multi")(grads, *states, params, **opts)
    for k in range(len(grads)):
        single = getattr(OPS, name)(grads[k], *[s[k] for s in states],
                                    params[k], **opts)
        for out_list, one in zip(multi, single):
            assert torch.equal(out_list[k], one)


def test_multi_tensor_gradients_match_per_tensor():
    grads, states, params = _lists(2, sizes=[3, 1, 5])
    leaves = [t.requires_grad_() for t in grads + states[0] + states[1] + params]
    opts = dict(count=2, lr=0.1, eps=1e-3, eps_root=1e-6, weight_decay=0.1)
    u, m, v = OPS.adam_multi(grads, states[0], states[1], params, **opts)
    loss = sum((a * a).sum() + b.sum() + c.sum() for a, b, c in zip(u, m, v))
    multi = torch.autograd.grad(loss, leaves)
    loss = 0
    for k in range(3):
        a, b, c = OPS.adam(grads[k], states[0][k], states[1][k], params[k], **opts)
        loss = loss + (a * a).sum() + b.sum() + c.sum()
    single = torch.autograd.grad(loss, leaves)
    for a, b in zip(multi, single):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-16)
    assert torch.autograd.gradgradcheck(
        lambda *xs: OPS.adam_multi(xs[0:2], xs[2:4], xs[4:6], xs[6:8], **opts)[0],
        [t.detach()[:2].clone().requires_grad_() for t in
         (grads[0], grads[2], states[0][0], states[0][2], states[1][0],
          states[1][2], params[0], params[2])])


def test_no_grad_and_grad_paths_agree():
    grads, states, params = _lists(2, sizes=[5, 70_001])
    opts = dict(count=4, lr=0.1, eps_root=1e-8)
    plain = OPS.adam_multi(grads, *states, params, **opts)
    g2 = [t.clone().requires_grad_() for t in grads]
    tracked = OPS.adam_multi(g2, *states, params, **opts)
    for a, b in zip(plain, tracked):
        for x, y in zip(a, b):
            assert torch.equal(x, y.detach())


# --- dtypes -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reduced_precision_is_computed_in_float32(dtype):
    gen = torch.Generator().manual_seed(5)
    g, mu = (torch.randn(1001, generator=gen).to(dtype) for _ in range(2))
    nu = (torch.rand(1001, generator=gen) + 0.1).to(dtype)
    out = OPS.adam(g, mu, nu, None, count=2, lr=0.1)
    assert all(o.dtype == dtype for o in out)
    expected = ref.adam(g.float(), mu.float(), nu.float(), None, count=2, lr=0.1)
    tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-2}[dtype]
    for a, b in zip(out, expected):
        torch.testing.assert_close(a.float(), b.to(dtype).float(), rtol=tol, atol=tol)


def test_non_contiguous_inputs():
    g = torch.randn(6, 5, **F64).t()
    mu, nu = torch.randn(6, 5, **F64).t(), torch.rand(6, 5, **F64).t()
    out = OPS.adam(g, mu, nu, None, count=1)
    for a, b in zip(out, ref.adam(g, mu, nu, None, count=1)):
        torch.testing.assert_close(a, b)


# --- errors -------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: OPS.adam(torch.randn(3), torch.randn(4), torch.rand(3), None, count=1),
     r"`mus` tensor 0 must have the shape"),
    (lambda: OPS.adam(torch.randn(3), torch.randn(3), torch.rand(3, **F64), None,
                      count=1), r"`nus` tensor 0 must have the dtype"),
    (lambda: OPS.adam(torch.randn(3), torch.randn(3), torch.rand(3), None, count=0),
     r"`count`"),
    (lambda: OPS.adam(torch.randn(3), torch.randn(3), torch.rand(3), None, count=1,
                      b1=1.0), r"`b1`"),
    (lambda: OPS.adam(torch.randn(3), torch.randn(3), torch.rand(3), None, count=1,
                      weight_decay=0.1), r"weight_decay != 0 needs the parameters"),
    (lambda: OPS.adam_multi([torch.randn(3)], [], [torch.rand(3)], [], count=1),
     r"`mus` must hold one tensor per gradient"),
    (lambda: OPS.adam_multi([torch.randn(3), torch.randn(2, **F64)],
                            [torch.zeros(3), torch.zeros(2, **F64)],
                            [torch.zeros(3), torch.zeros(2, **F64)], [], count=1),
     r"all tensors of one call must share a dtype"),
    (lambda: OPS.adam_multi_([torch.randn(3)], [torch.zeros(3)], [torch.zeros(3)],
                             [torch.zeros(6)[::2]], count=1),
     r"`params` tensor 0 must be contiguous"),
    (lambda: OPS.sgd(torch.randn(3), None, None, count=1, lr=0.1, nesterov=True),
     r"`nesterov` needs momentum > 0"),
    (lambda: OPS.sgd(torch.randn(3), torch.randn(3), None, count=1, lr=0.1),
     r"without momentum there is no momentum buffer"),
    (lambda: OPS.rmsprop(torch.randn(3), torch.rand(3), torch.randn(3), None, None),
     r"`grad_avgs` is only used when centered"),
    (lambda: OPS.adagrad(torch.randint(0, 3, (3,)), torch.zeros(3, dtype=torch.long),
                         None, count=1), r"floating-point"),
])
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


@pytest.mark.parametrize("opts", [
    dict(count=2, lr=0.1, eps=1e-3, eps_root=1e-6),
    dict(count=5, lr=0.1, weight_decay=0.1, maximize=True),
    dict(count=3, lr=0.1, weight_decay=0.1, decoupled_weight_decay=True),
])
def test_adam_fused_first_order_backward_equals_differentiable_one(opts):
    """Adam's first-order backward runs as one fused kernel; with
    create_graph=True the same closed form runs in ATen ops. Same numbers."""
    grads, states, params = _lists(2, sizes=[3, 40_001, 1])
    leaves = [t.requires_grad_() for t in grads + states[0] + states[1] + params]
    u, m, v = OPS.adam_multi(grads, states[0], states[1], params, **opts)
    gen = torch.Generator().manual_seed(9)
    loss = sum((a * torch.randn(a.shape, generator=gen, **F64)).sum() + b.sum()
               + (c * c).sum() for a, b, c in zip(u, m, v))
    fused = torch.autograd.grad(loss, leaves, retain_graph=True, allow_unused=True)
    aten = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
    for a, b in zip(fused, aten):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b.detach(), rtol=1e-13, atol=1e-15)


# --- in-place multi-tensor step (what torch.optim-style classes call) -------

@pytest.mark.parametrize("name, opts, n_states", [
    ("adam", dict(count=3, lr=0.1, eps_root=1e-8, weight_decay=0.1), 2),
    ("adam", dict(count=1, lr=0.1), 2),
    ("sgd", dict(count=2, lr=0.1, momentum=0.9, nesterov=True), 1),
    ("sgd", dict(count=2, lr=0.1), 0),
    ("rmsprop", dict(lr=0.1, momentum=0.9, centered=True), 3),
    ("adagrad", dict(count=2, lr=0.1, weight_decay=0.1), 1),
    ("adamax", dict(count=2), 2),
    ("adadelta", dict(weight_decay=0.1), 2),
    ("radam", dict(count=9, decoupled_weight_decay=True, weight_decay=0.1), 2),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_in_place_multi_step_equals_functional(name, opts, n_states, dtype):
    grads, states, params = _lists(max(n_states, 1), dtype=dtype)
    if n_states == 0:
        states = [[]]
    if name == "rmsprop":
        states[0] = [a + b * b for a, b in zip(*states[:2])]
    functional = getattr(OPS, name + "_multi")(grads, *states, params, **opts)
    p2 = [p.clone() for p in params]
    s2 = [[t.clone() for t in l] for l in states]
    getattr(OPS, name + "_multi_")(grads, *s2, p2, **opts)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-14, atol=1e-15)
    for k in range(len(params)):
        torch.testing.assert_close(p2[k], params[k] + functional[0][k], **tol)
        for j, l in enumerate(s2):
            if l:
                torch.testing.assert_close(l[k], functional[1 + j][k], **tol)


def test_in_place_step_refuses_tensors_that_require_grad():
    p = [torch.randn(3, requires_grad=True)]
    with pytest.raises(RuntimeError, match="in-place step is not differentiable"):
        OPS.adam_multi_([torch.randn(3)], [torch.zeros(3)], [torch.zeros(3)], p,
                        count=1)
    with torch.no_grad():
        OPS.adam_multi_([torch.randn(3)], [torch.zeros(3)], [torch.zeros(3)], p,
                        count=1)
