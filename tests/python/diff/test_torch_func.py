"""torch.func transforms over metafuse's differentiable pieces (torch >= 2.0):
implicit differentiation (custom_root, ImplicitMetaGradientModule) under
vmap, grad, jacrev, jacfwd and their nestings against Python loops and
closed forms (float64); the fused optimizer operators; and the clear errors
of what cannot run under a transform (compiled programs, metafuse.vmap,
zero-order estimates, fused=True optimizers)."""

import warnings

import pytest
import torch

import metafuse
from metafuse import _torch_func
from metafuse.diff.implicit import (ImplicitMetaGradientModule, custom_root, linalg,
                                    linear_solve)

pytestmark = pytest.mark.skipif(
    not _torch_func.FUNCTORCH_FORM or not hasattr(torch, "func"),
    reason="torch.func transforms over autograd.Function need torch >= 2.0 "
           f"(this is torch {torch.__version__})")

F64 = torch.float64
D = 3
TIGHT = dict(rtol=1e-9, atol=1e-11)

SOLVERS = {
    "normal_cg": lambda: linear_solve.solve_normal_cg(),
    "cg": lambda: linear_solve.solve_cg(),
    "inv": lambda: linear_solve.solve_inv(),
}


def ridge_data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, D, dtype=F64, generator=g)
    y = X @ torch.randn(D, dtype=F64, generator=g) + 0.1 * torch.randn(n, dtype=F64,
                                                                         generator=g)
    Xv = torch.randn(n, D, dtype=F64, generator=g)
    yv = torch.randn(n, dtype=F64, generator=g)
    return X, y, Xv, yv


def ridge_optimality(w, lam, X, y):
    return X.T @ (X @ w - y) + lam * w


def closed_form(lam, X, y):
    """The ridge solution, differentiable by autograd: the reference."""
    return torch.linalg.solve(X.T @ X + lam * torch.eye(D, dtype=F64), X.T @ y)


def ridge_solver(solve):
    @custom_root(ridge_optimality, argnums=1, solve=solve)
    def solver(w0, lam, X, y):
        return closed_form(lam, X, y)
    return solver


def fixed_point_solver(solve, steps=400, eta=0.02):
    """A solver that iterates the fixed point w = w - eta F(w) (gradient
    descent on the ridge objective), as in TorchOpt issue #223."""
    @custom_root(ridge_optimality, argnums=1, solve=solve)
    def solver(w0, lam, X, y):
        w = w0
        for _ in range(steps):
            w = w - eta * ridge_optimality(w, lam, X, y)
        return w
    return solver


def validation_loss(w, Xv, yv):
    return 0.5 * ((Xv @ w - yv) ** 2).sum()


def hypergradient(lam, X, y, Xv, yv):
    """d validation_loss(w*(lam)) / d lam, by the implicit function theorem."""
    A = X.T @ X + lam * torch.eye(D, dtype=F64)
    w = torch.linalg.solve(A, X.T @ y)
    return -(Xv.T @ (Xv @ w - yv)) @ torch.linalg.solve(A, w)


LAMS = torch.tensor([0.1, 0.5, 1.0, 2.5], dtype=F64)


# -- custom_root ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_vmap_of_grad_equals_a_loop_and_the_implicit_gradient(name):
    X, y, Xv, yv = ridge_data()
    solver = ridge_solver(SOLVERS[name]())

    def outer(lam):
        return validation_loss(solver(torch.zeros(D, dtype=F64), lam, X, y), Xv, yv)

    batched = torch.func.vmap(torch.func.grad(outer))(LAMS)
    loop = torch.stack([torch.func.grad(outer)(lam) for lam in LAMS])
    assert torch.allclose(batched, loop, **TIGHT)
    analytic = torch.stack([hypergradient(lam, X, y, Xv, yv) for lam in LAMS])
    assert torch.allclose(batched, analytic, **TIGHT)
    # The plain autograd path (the C++ solve) gives the same numbers.
    eager = []
    for lam in LAMS:
        lam = lam.clone().requires_grad_()
        eager.append(torch.autograd.grad(outer(lam), lam)[0])
    assert torch.allclose(batched, torch.stack(eager), **TIGHT)


def test_vmap_of_grad_over_a_fixed_point_solver_with_batched_data():
    solver = fixed_point_solver(linear_solve.solve_cg())
    data = [ridge_data(seed=s) for s in range(3)]
    X, y, Xv, yv = (torch.stack(t) for t in zip(*data))
    lams = LAMS[:3]

    def outer(lam, X, y, Xv, yv):
        return validation_loss(solver(torch.zeros(D, dtype=F64), lam, X, y), Xv, yv)

    batched = torch.func.vmap(torch.func.grad(outer))(lams, X, y, Xv, yv)
    loop = torch.stack([torch.func.grad(outer)(*args) for args in zip(lams, X, y, Xv, yv)])
    assert torch.allclose(batched, loop, **TIGHT)
    analytic = torch.stack([hypergradient(*args) for args in zip(lams, X, y, Xv, yv)])
    # (the fixed point is reached to about 1e-13)
    assert torch.allclose(batched, analytic, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_jacrev_equals_the_analytic_jacobian_and_finite_differences(name):
    X, y, _, _ = ridge_data()
    solver = ridge_solver(SOLVERS[name]())
    lam = torch.tensor(0.7, dtype=F64)
    jac = torch.func.jacrev(lambda l: solver(torch.zeros(D, dtype=F64), l, X, y))(lam)
    A = X.T @ X + lam * torch.eye(D, dtype=F64)
    analytic = -torch.linalg.solve(A, closed_form(lam, X, y))  # dw*/dlam
    assert torch.allclose(jac, analytic, **TIGHT)
    h = 1e-6
    finite = (closed_form(lam + h, X, y) - closed_form(lam - h, X, y)) / (2 * h)
    assert torch.allclose(jac, finite, rtol=1e-6, atol=1e-8)


def test_jacrev_and_jacfwd_with_respect_to_a_vector_of_metas():
    X, y, _, _ = ridge_data()

    def optimality(w, lams, X, y):  # one ridge weight per coordinate
        return X.T @ (X @ w - y) + lams * w

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_normal_cg())
    def solver(w0, lams, X, y):
        return torch.linalg.solve(X.T @ X + torch.diag(lams), X.T @ y)

    lams = torch.tensor([0.3, 1.0, 2.0], dtype=F64)
    A = X.T @ X + torch.diag(lams)
    w = torch.linalg.solve(A, X.T @ y)
    analytic = -torch.linalg.solve(A, torch.diag(w))  # dw*/dlams
    rev = torch.func.jacrev(lambda l: solver(torch.zeros(D, dtype=F64), l, X, y))(lams)
    fwd = torch.func.jacfwd(lambda l: solver(torch.zeros(D, dtype=F64), l, X, y))(lams)
    assert torch.allclose(rev, analytic, **TIGHT)
    assert torch.allclose(fwd, analytic, **TIGHT)
    batched = torch.func.vmap(torch.func.jacrev(
        lambda l: solver(torch.zeros(D, dtype=F64), l, X, y)))(torch.stack([lams, 2 * lams]))
    assert torch.allclose(batched[0], analytic, **TIGHT)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_second_derivatives_include_the_solutions_own_dependence(name):
    X, y, Xv, yv = ridge_data()
    solver = ridge_solver(SOLVERS[name]())
    lam = torch.tensor(0.7, dtype=F64)

    def outer(l):
        return validation_loss(solver(torch.zeros(D, dtype=F64), l, X, y), Xv, yv)

    def reference(l):
        return validation_loss(closed_form(l, X, y), Xv, yv)

    expected = torch.func.grad(torch.func.grad(reference))(lam)
    assert torch.allclose(torch.func.grad(torch.func.grad(outer))(lam), expected, **TIGHT)
    assert torch.allclose(torch.func.hessian(outer)(lam), expected, **TIGHT)
    # Plain autograd, a backward with create_graph=True, agrees.
    l = lam.clone().requires_grad_()
    (g,) = torch.autograd.grad(outer(l), l, create_graph=True)
    (h,) = torch.autograd.grad(g, l)
    assert torch.allclose(h, expected, **TIGHT)


def test_pytree_solution_with_aux_and_keyword_data_under_vmap_of_grad():
    X, y, Xv, yv = ridge_data()

    def optimality(sol, lam, *, X, y):
        w, b = sol["w"], sol["b"]
        r = X @ w + b - y
        return {"w": X.T @ r + lam * w, "b": r.sum() + lam * b}

    @custom_root(optimality, argnums=1, has_aux=True, solve=linear_solve.solve_cg())
    def solver(init, lam, *, X, y):
        Xa = torch.cat([X, torch.ones(X.shape[0], 1, dtype=F64)], 1)
        wb = torch.linalg.solve(Xa.T @ Xa + lam * torch.eye(D + 1, dtype=F64), Xa.T @ y)
        return {"w": wb[:D], "b": wb[D]}, "aux"

    def outer(lam):
        sol, aux = solver(None, lam, X=X, y=y)
        assert aux == "aux"
        return 0.5 * ((Xv @ sol["w"] + sol["b"] - yv) ** 2).sum()

    def reference(lam):
        Xa = torch.cat([X, torch.ones(X.shape[0], 1, dtype=F64)], 1)
        wb = torch.linalg.solve(Xa.T @ Xa + lam * torch.eye(D + 1, dtype=F64), Xa.T @ y)
        return 0.5 * ((Xv @ wb[:D] + wb[D] - yv) ** 2).sum()

    batched = torch.func.vmap(torch.func.grad(outer))(LAMS)
    expected = torch.stack([torch.func.grad(reference)(lam) for lam in LAMS])
    assert torch.allclose(batched, expected, **TIGHT)


@pytest.mark.parametrize("style", ["torch.func.grad", "torch.autograd.grad"])
def test_an_optimality_function_that_differentiates_an_objective(style):
    X, y, Xv, yv = ridge_data()

    def objective(w, lam):
        return 0.5 * ((X @ w - y) ** 2).sum() + 0.5 * lam * (w ** 2).sum()

    if style == "torch.func.grad":
        def optimality(w, lam):
            return torch.func.grad(objective)(w, lam)
    else:
        def optimality(w, lam):
            return torch.autograd.grad(objective(w, lam), w, create_graph=True)[0]

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_cg())
    def solver(w0, lam):
        return closed_form(lam, X, y)

    def outer(lam):
        return validation_loss(solver(torch.zeros(D, dtype=F64), lam), Xv, yv)

    batched = torch.func.vmap(torch.func.grad(outer))(LAMS)
    analytic = torch.stack([hypergradient(lam, X, y, Xv, yv) for lam in LAMS])
    assert torch.allclose(batched, analytic, **TIGHT)


def test_vmap_then_backward_outside_the_transform():
    X, y, Xv, yv = ridge_data()
    solver = ridge_solver(linear_solve.solve_normal_cg())
    lams = LAMS.clone().requires_grad_()
    ws = torch.func.vmap(lambda l: solver(torch.zeros(D, dtype=F64), l, X, y))(lams)
    validation_loss(ws.T, Xv, yv.unsqueeze(1)).backward()
    analytic = torch.stack([hypergradient(lam, X, y, Xv, yv) for lam in LAMS])
    assert torch.allclose(lams.grad, analytic, **TIGHT)


# -- ImplicitMetaGradientModule ------------------------------------------------

class RidgeModule(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_cg()):
    def __init__(self, lam):
        super().__init__()
        self.lam = lam
        self.w = torch.nn.Parameter(torch.zeros(D, dtype=F64))

    def objective(self, X, y):
        return 0.5 * ((X @ self.w - y) ** 2).sum() + 0.5 * self.lam * (self.w ** 2).sum()

    def solve(self, X, y):
        with torch.no_grad():
            self.w.copy_(closed_form(self.lam, X, y))
        return self


def test_implicit_module_under_grad_grad_of_grad_and_jacrev():
    X, y, Xv, yv = ridge_data()
    lam = torch.tensor(0.7, dtype=F64)

    def outer(l):
        return validation_loss(RidgeModule(l).solve(X, y).w, Xv, yv)

    def reference(l):
        return validation_loss(closed_form(l, X, y), Xv, yv)

    assert torch.allclose(torch.func.grad(outer)(lam), hypergradient(lam, X, y, Xv, yv),
                          **TIGHT)
    assert torch.allclose(torch.func.grad(torch.func.grad(outer))(lam),
                          torch.func.grad(torch.func.grad(reference))(lam), **TIGHT)
    jac = torch.func.jacrev(lambda l: RidgeModule(l).solve(X, y).w)(lam)
    assert torch.allclose(jac, torch.func.jacrev(closed_form)(lam, X, y), **TIGHT)


# -- linear solvers under vmap ---------------------------------------------------

def test_linalg_solvers_under_vmap_equal_a_loop():
    g = torch.Generator().manual_seed(3)
    M = torch.randn(4, D, D, dtype=F64, generator=g)
    A = M @ M.transpose(1, 2) + torch.eye(D, dtype=F64)
    b = torch.randn(4, D, dtype=F64, generator=g)
    for solve in (lambda A, b: linalg.cg(lambda x: A @ x, b, rtol=1e-12),
                  lambda A, b: linear_solve.solve_normal_cg()(lambda x: A @ x, b),
                  lambda A, b: linear_solve.solve_inv()(lambda x: A @ x, b)):
        batched = torch.func.vmap(solve)(A, b)
        loop = torch.stack([solve(a, v) for a, v in zip(A, b)])
        assert torch.allclose(batched, loop, **TIGHT)
        assert torch.allclose(batched, torch.linalg.solve(A, b), **TIGHT)
    alpha = 0.5 / torch.linalg.matrix_norm(A, ord=2).max().item()
    batched = torch.func.vmap(lambda A, b: linalg.ns(lambda x: A @ x, b, 5, alpha=alpha))(A, b)
    loop = torch.stack([linalg.ns(lambda x, a=a: a @ x, v, 5, alpha=alpha) for a, v in zip(A, b)])
    assert torch.allclose(batched, loop, **TIGHT)


# -- fused optimizer operators --------------------------------------------------

def adam_steps(fused, p, g, steps=3):
    tx = metafuse.adam(0.1, fused=fused)
    params = (p,)
    state = tx.init(params)
    for _ in range(steps):
        grads = (g * params[0] + params[0] ** 2,)
        updates, state = tx.update(grads, state, params=params, inplace=False)
        params = metafuse.apply_updates(params, updates, inplace=False)
    return (params[0] ** 2).sum()


def test_grad_of_a_fused_adam_update_equals_the_unfused_one():
    g0 = torch.randn(5, dtype=F64, generator=torch.Generator().manual_seed(4))
    p0 = torch.randn(5, dtype=F64, generator=torch.Generator().manual_seed(5))
    p = p0.clone().requires_grad_()
    (fused,) = torch.autograd.grad(adam_steps(True, p, g0), p, create_graph=True)
    (fused_hvp,) = torch.autograd.grad(fused.sum(), p)
    p = p0.clone().requires_grad_()
    (unfused,) = torch.autograd.grad(adam_steps(False, p, g0), p, create_graph=True)
    (unfused_hvp,) = torch.autograd.grad(unfused.sum(), p)
    assert torch.allclose(fused, unfused, **TIGHT)
    assert torch.allclose(fused_hvp, unfused_hvp, **TIGHT)
    # The unfused update under torch.func: grad, jacrev and vmap agree with it.
    assert torch.allclose(torch.func.grad(lambda q: adam_steps(False, q, g0))(p0), fused,
                          **TIGHT)
    assert torch.allclose(torch.func.jacrev(lambda q: adam_steps(False, q, g0))(p0), fused,
                          **TIGHT)
    ps = torch.stack([p0, 2 * p0])
    batched = torch.func.vmap(torch.func.grad(lambda q: adam_steps(False, q, g0)))(ps)
    assert torch.allclose(batched[1], torch.func.grad(lambda q: adam_steps(False, q, g0))(ps[1]),
                          **TIGHT)


@pytest.mark.parametrize("transform", ["grad", "vmap", "jacrev"])
def test_a_fused_optimizer_under_a_transform_names_fused_false(transform):
    g0 = torch.randn(5, dtype=F64)
    f = {"grad": torch.func.grad, "vmap": torch.func.vmap,
         "jacrev": torch.func.jacrev}[transform](lambda q: adam_steps(True, q, g0))
    p = torch.randn(2, 5, dtype=F64) if transform == "vmap" else torch.randn(5, dtype=F64)
    with pytest.raises(RuntimeError, match=r"metafuse\.adam\(fused=True\).*fused=False"):
        f(p)


@pytest.mark.skipif(not hasattr(torch.library, "register_vmap"),
                    reason="batching rules for C++ operators need torch >= 2.4")
def test_the_fused_operators_batch_under_vmap():
    gen = torch.Generator().manual_seed(6)
    grad, mu, nu, param = (torch.randn(4, 5, dtype=F64, generator=gen) for _ in range(4))
    nu = nu.abs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no per-sample fallback (its performance warning)
        out = torch.func.vmap(lambda g, m, v, p: metafuse.ops.adam(g, m, v, p, count=2),
                              in_dims=(0, 0, 0, None))(grad, mu, nu, param[0])
        ema = torch.func.vmap(metafuse.ops.ema_update, in_dims=(1, 0, None, None))(
            mu.T, grad, 0.9, 2)
    loop = [metafuse.ops.adam(g, m, v, param[0], count=2) for g, m, v in zip(grad, mu, nu)]
    for j in range(3):
        assert torch.allclose(out[j], torch.stack([step[j] for step in loop]), **TIGHT)
    assert torch.allclose(ema, 0.9 * mu + 0.1 * grad ** 2, **TIGHT)
    # Batched, then differentiated outside the transform: the C++ backward.
    g = grad.clone().requires_grad_()
    update = torch.func.vmap(lambda g, m, v: metafuse.ops.adam(g, m, v, count=2)[0])(g, mu, nu)
    update.sum().backward()
    expected = []
    for gi, m, v in zip(grad, mu, nu):
        gi = gi.clone().requires_grad_()
        expected.append(torch.autograd.grad(metafuse.ops.adam(gi, m, v, count=2)[0].sum(), gi)[0])
    assert torch.allclose(g.grad, torch.stack(expected), **TIGHT)


def test_fused_operators_under_grad_name_themselves():
    m = torch.zeros(5, dtype=F64)
    with pytest.raises(_torch_func.TorchFuncUnsupportedError, match=r"metafuse\.ops\.adam "):
        torch.func.grad(lambda g: metafuse.ops.adam(g, m, m, count=1)[0].sum())(m + 1)
    with pytest.raises(_torch_func.TorchFuncUnsupportedError, match=r"metafuse\.ops\.ema_update"):
        torch.func.grad(lambda u: metafuse.ops.ema_update(m, u, 0.9).sum())(m + 1)


# -- what raises: compiled programs, metafuse.vmap, zero-order ------------------

def _task_data():
    gen = torch.Generator().manual_seed(7)
    return (torch.randn(D, dtype=F64, generator=gen),
            torch.randn(2, 6, D, dtype=F64, generator=gen),
            torch.randn(2, 6, dtype=F64, generator=gen))


def _inner_loss(params, x, y):
    return ((x @ params["w"] - y) ** 2).mean()


def test_a_compiled_function_under_a_transform_names_the_compiled_routes():
    w, X, Y = _task_data()

    @metafuse.compile
    def task_loss(w, x, y):
        g = metafuse.grad(_inner_loss({"w": w}, x, y), w)
        return _inner_loss({"w": w - 0.1 * g}, x, y)

    for run in (lambda: torch.func.grad(task_loss)(w, X[0], Y[0]),
                lambda: torch.func.vmap(task_loss, in_dims=(None, 0, 0))(w, X, Y)):
        with pytest.raises(_torch_func.TorchFuncUnsupportedError) as info:
            run()
        message = str(info.value)
        assert "metafuse.compile (task_loss)" in message
        assert "metafuse.vmap" in message and "metafuse.grad" in message
    # Outside the transform it still compiles and runs.
    assert torch.isfinite(task_loss(w.clone().requires_grad_(), X[0], Y[0]))


def test_a_loaded_aot_program_under_a_transform_names_itself(tmp_path):
    w, X, Y = _task_data()

    @metafuse.compile
    def task_loss(w, x, y):
        return _inner_loss({"w": w}, x, y)

    path = str(tmp_path / "task.mfa")
    metafuse.aot.save(task_loss, path, w.clone().requires_grad_(), X[0], Y[0])
    loaded = metafuse.aot.load(path)
    with pytest.raises(_torch_func.TorchFuncUnsupportedError,
                       match=r"metafuse\.aot\.LoadedProgram.*metafuse\.vmap"):
        torch.func.grad(loaded)(w, X[0], Y[0])
    assert torch.allclose(loaded(w, X[0], Y[0]), task_loss(w, X[0], Y[0]), **TIGHT)


def test_metafuse_vmap_under_a_transform_names_itself():
    w, X, Y = _task_data()

    def task_loss(w, x, y):
        return _inner_loss({"w": w}, x, y)

    batched = metafuse.vmap(task_loss, in_dims=(None, 0, 0))
    with pytest.raises(_torch_func.TorchFuncUnsupportedError,
                       match=r"metafuse\.vmap \(task_loss\)"):
        torch.func.grad(lambda w: batched(w, X, Y).sum())(w)


def test_an_inner_loop_under_a_transform_runs_eagerly_and_stays_compiled_outside():
    w, X, Y = _task_data()
    adapt = metafuse.compile_inner_loop(_inner_loss, metafuse.sgd(0.1), steps=2)

    def task_loss(w, x, y):
        return _inner_loss(adapt({"w": w}, x, y), x, y)

    def reference(w, x, y):
        p = {"w": w}
        for _ in range(2):
            g = torch.func.grad(lambda v: _inner_loss({"w": v}, x, y))(p["w"])
            p = {"w": p["w"] - 0.1 * g}
        return _inner_loss(p, x, y)

    with pytest.warns(metafuse.CompilationFallbackWarning, match="torch.func transform"):
        batched = torch.func.vmap(torch.func.grad(task_loss), in_dims=(None, 0, 0))(w, X, Y)
    expected = torch.func.vmap(torch.func.grad(reference), in_dims=(None, 0, 0))(w, X, Y)
    assert torch.allclose(batched, expected, **TIGHT)
    # No fallback was cached: outside the transform the loop compiles.
    with warnings.catch_warnings():
        warnings.simplefilter("error", metafuse.CompilationFallbackWarning)
        v = w.clone().requires_grad_()
        (g,) = torch.autograd.grad(task_loss(v, X[0], Y[0]), v)
    assert adapt.compile_count == 1
    assert torch.allclose(g, expected[0], **TIGHT)


def test_zero_order_under_a_transform_names_itself():
    @metafuse.diff.zero_order(torch.distributions.Normal(0.0, 1.0), num_samples=4)
    def objective(theta):
        return (theta ** 2).sum()

    with pytest.raises(_torch_func.TorchFuncUnsupportedError,
                       match=r"metafuse\.diff\.zero_order \(objective\)"):
        torch.func.grad(objective)(torch.ones(3, dtype=F64))
    with pytest.raises(RuntimeError, match=r"metafuse\.diff\.zero_order \(objective\)"):
        torch.func.vmap(objective)(torch.ones(2, 3, dtype=F64))
