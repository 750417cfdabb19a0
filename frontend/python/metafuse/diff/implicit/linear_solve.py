"""Linear solvers for custom_root: each ``solve_*(**options)`` returns a
function ``solve(matvec, b) -> x`` for (A + ridge I) x = b, A given only
through ``matvec`` (a callable on pytrees shaped like ``b``).

The solve runs in C++; under a torch.func transform, and in custom_root's
backward where its result must be differentiable, it runs the same
algorithm as torch operations (linalg.torch_*): each solver carries that
form as ``solve._metafuse_differentiable``.
"""

import functools

import torch

from metafuse import _C
from metafuse import _torch_func
from metafuse import tree as _tree
from metafuse.diff.implicit import linalg

_core = _C._diff

__all__ = ["solve_cg", "solve_normal_cg", "solve_inv"]


def _transpose(matvec):
    """A^T v by differentiating <A u, v> in u (matvec must be linear and
    built from differentiable ops)."""
    def rmatvec(v):
        leaves_v, spec = _tree.flatten(v)
        u = [torch.zeros_like(t).requires_grad_() for t in leaves_v]
        with torch.enable_grad():
            out = _tree.flatten_as(spec, matvec(_tree.unflatten(spec, u)))
            inner = sum((o * w).sum() for o, w in zip(out, leaves_v))
            grads = torch.autograd.grad(inner, u, allow_unused=True)
        return _tree.unflatten(spec, [torch.zeros_like(t) if g is None else g
                                      for g, t in zip(grads, leaves_v)])
    return rmatvec


def _torch_transpose(op):
    """A^T on leaf lists for the torch-operation solvers: by torch.func.vjp
    under a transform, by autograd with create_graph outside (the result
    stays differentiable in v and in what A depends on)."""
    def op_t(v):
        v = list(v)
        if _torch_func.transforms_active():
            _, pullback = _torch_func.vjp()(lambda *u: tuple(op(list(u))),
                                            *[torch.zeros_like(t) for t in v])
            return list(pullback(tuple(v)))
        u = [torch.zeros_like(t).requires_grad_() for t in v]
        with torch.enable_grad():
            out = op(u)
            inner = sum((o * w).sum() for o, w in zip(out, v))
            grads = torch.autograd.grad(inner, u, create_graph=True, allow_unused=True)
        return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, v)]
    return op_t


def _differentiable(solve, torch_solve):
    """``solve`` running ``torch_solve`` under a torch.func transform, with
    ``torch_solve`` attached for custom_root's backward."""
    @functools.wraps(solve)
    def run(matvec, b):
        if _torch_func.transforms_active():
            return torch_solve(matvec, b)
        return solve(matvec, b)
    run._metafuse_differentiable = torch_solve
    return run


def solve_cg(*, ridge=None, init=None, maxiter=None, rtol=1e-10, atol=0.0,
             M=None):
    """Conjugate gradient: for symmetric positive definite operators (the
    Hessian of a strictly convex inner objective). ``ridge`` (None: 0)
    solves (A + ridge I) x = b; ``M`` is a preconditioner (see linalg.cg).
    The default tolerance is tighter than TorchOpt's (rtol 1e-10, not 1e-5):
    implicit gradients are then accurate to about 1e-8."""
    ridge = linalg._check_options("solve_cg", ridge, maxiter, rtol, atol)

    def solve(matvec, b):
        return linalg.cg(matvec, b, init, ridge=ridge, maxiter=maxiter,
                         rtol=rtol, atol=atol, M=M)

    def torch_solve(matvec, b):
        leaves, spec = linalg._leaves(b, "solve_cg")
        initial = None if init is None else list(_tree.flatten_as(spec, init))
        precondition = None if M is None else linalg._flat_operator(M, spec, "solve_cg (M)")
        x = linalg.torch_cg(linalg._flat_operator(matvec, spec, "solve_cg"), leaves,
                            initial, ridge=ridge, maxiter=maxiter, rtol=rtol, atol=atol,
                            precondition=precondition, name="solve_cg")
        return _tree.unflatten(spec, x)
    return _differentiable(solve, torch_solve)


def solve_normal_cg(*, ridge=None, init=None, maxiter=None, rtol=1e-10,
                    atol=0.0, rmatvec=None):
    """CG on the normal equations A^T A x = A^T b: any invertible operator.
    A^T comes from ``rmatvec`` or, by default, from autograd."""
    ridge = linalg._check_options("solve_normal_cg", ridge, maxiter, rtol, atol)

    def solve(matvec, b):
        leaves, spec = linalg._leaves(b, "solve_normal_cg")
        transpose = rmatvec if rmatvec is not None else _transpose(matvec)
        initial = [] if init is None else list(_tree.flatten_as(spec, init))
        with torch.no_grad():
            result = _core.normal_cg(
                linalg._flat_operator(matvec, spec, "solve_normal_cg"),
                linalg._flat_operator(transpose, spec, "solve_normal_cg"),
                leaves, ridge, -1 if maxiter is None else int(maxiter),
                float(rtol), float(atol), initial)
        return _tree.unflatten(spec, linalg.report("solve_normal_cg", result))

    def torch_solve(matvec, b):
        leaves, spec = linalg._leaves(b, "solve_normal_cg")
        op = linalg._flat_operator(matvec, spec, "solve_normal_cg")
        op_t = (_torch_transpose(op) if rmatvec is None
                else linalg._flat_operator(rmatvec, spec, "solve_normal_cg"))
        initial = None if init is None else list(_tree.flatten_as(spec, init))
        x = linalg.torch_normal_cg(op, op_t, leaves, initial, ridge=ridge, maxiter=maxiter,
                                   rtol=rtol, atol=atol, name="solve_normal_cg")
        return _tree.unflatten(spec, x)
    return _differentiable(solve, torch_solve)


def solve_inv(*, ridge=None, ns=False, maxiter=None, alpha=None, rtol=None,
              atol=0.0):
    """Inverts the operator: densely (forms the matrix with one matvec per
    unknown, then LU; exact, for small problems) or, with ``ns=True``, by
    the Neumann series with step ``alpha`` (None: 1): ``maxiter`` terms
    (default 10) as TorchOpt does, or, given ``rtol`` (a metafuse
    extension), until the residual is below max(rtol ``|b|``, atol)."""
    ridge = linalg._check_options("solve_inv", ridge,
                                  None if maxiter == 0 else maxiter,
                                  0.0 if rtol is None else rtol, atol)
    alpha = linalg._check_alpha("solve_inv", alpha)

    def solve(matvec, b):
        if ns and rtol is None:
            return linalg.ns(matvec, b, maxiter, alpha=alpha, ridge=ridge)
        leaves, spec = linalg._leaves(b, "solve_inv")
        op = linalg._flat_operator(matvec, spec, "solve_inv")
        with torch.no_grad():
            if ns:
                result = _core.neumann(op, leaves, alpha, ridge,
                                       -1 if maxiter is None else int(maxiter),
                                       float(rtol), float(atol))
            else:
                result = _core.dense(op, leaves, ridge)
        return _tree.unflatten(spec, linalg.report("solve_inv", result))

    def torch_solve(matvec, b):
        leaves, spec = linalg._leaves(b, "solve_inv")
        op = linalg._flat_operator(matvec, spec, "solve_inv")
        if not ns:
            x = linalg.torch_dense(op, leaves, ridge=ridge, name="solve_inv")
        elif rtol is None:
            x = linalg.torch_neumann(op, leaves, alpha, ridge=ridge,
                                     maxiter=linalg._check_maxiter("solve_inv", maxiter))
        else:
            limit = maxiter if maxiter is not None else max(10 * linalg._unknowns(leaves), 1)
            x = linalg.torch_neumann(op, leaves, alpha, ridge=ridge, maxiter=limit,
                                     rtol=rtol, atol=atol, name="solve_inv")
        return _tree.unflatten(spec, x)
    return _differentiable(solve, torch_solve)
