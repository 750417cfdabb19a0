"""Linear solvers for custom_root: each ``solve_*(**options)`` returns a
function ``solve(matvec, b) -> x`` for (A + ridge I) x = b, A given only
through ``matvec`` (a callable on pytrees shaped like ``b``)."""

import torch

from metafuse import _C
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
    return solve


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
    return solve


def solve_inv(*, ridge=None, ns=False, maxiter=None, alpha=None, rtol=None,
              atol=0.0):
    """Inverts the operator: densely (forms the matrix with one matvec per
    unknown, then LU; exact, for small problems) or, with ``ns=True``, by
    the Neumann series with step ``alpha`` (None: 1): ``maxiter`` terms
    (default 10) as TorchOpt does, or, given ``rtol`` (a metafuse
    extension), until the residual is below max(rtol |b|, atol)."""
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
    return solve
