"""Matrix-free linear algebra on pytrees: conjugate gradient and the Neumann
series. The work runs in C++ (metafuse._C._diff); the operator is a callable
applied to pytrees shaped like ``b`` (or a matrix, for a tensor ``b``)."""

import numbers
import warnings

import torch

from metafuse import _C
from metafuse import tree as _tree

_core = _C._diff

__all__ = ["cg", "ns", "ConvergenceWarning"]


class ConvergenceWarning(UserWarning):
    """A linear solve stopped before reaching its tolerance."""


def _flat_operator(A, spec, name):
    """A callable on pytrees (or a matrix) -> a callable on flat leaf lists."""
    if isinstance(A, torch.Tensor):
        if A.dim() != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"{name}: a matrix operator must be square, got "
                             f"shape {tuple(A.shape)}")
        return lambda leaves: [(A @ leaves[0].reshape(-1)).reshape(leaves[0].shape)]
    if not callable(A):
        raise TypeError(f"{name}: the operator must be a callable or a square "
                        f"matrix, got {type(A).__name__}")

    def apply(leaves):
        out = A(_tree.unflatten(spec, leaves))
        try:
            result = _tree.flatten_as(spec, out)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{name}: the operator must return a pytree with "
                             f"the structure of `b`: {exc}") from None
        if not all(isinstance(t, torch.Tensor) for t in result):
            raise TypeError(f"{name}: the operator must return tensors")
        return list(result)
    return apply


def _check_options(name, ridge, maxiter, rtol, atol):
    if not isinstance(ridge, numbers.Real) or ridge < 0:
        raise ValueError(f"{name}: `ridge` must be a number >= 0, got {ridge!r}")
    if maxiter is not None and (not isinstance(maxiter, numbers.Integral) or maxiter < 1):
        raise ValueError(f"{name}: `maxiter` must be an integer >= 1, got {maxiter!r}")
    for label, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, numbers.Real) or value < 0:
            raise ValueError(f"{name}: `{label}` must be a number >= 0, got {value!r}")


def report(name, result):
    """Warns when a solve did not reach its tolerance; returns x."""
    x, iterations, residual, target, converged = result
    if not converged:
        warnings.warn(f"{name} did not converge: residual {residual:.3e} after "
                      f"{iterations} iteration(s), target {target:.3e}",
                      ConvergenceWarning, stacklevel=3)
    return x


def _leaves(b, name):
    leaves, spec = _tree.flatten(b)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise TypeError(f"{name}: `b` must be a tensor or a pytree of tensors")
    return leaves, spec


def cg(A, b, x0=None, *, ridge=0.0, maxiter=None, rtol=1e-10, atol=0.0):
    """Solves (A + ridge I) x = b by conjugate gradient (A symmetric positive
    definite). Warns (ConvergenceWarning) with the residual reached if the
    tolerance is not met."""
    _check_options("cg", ridge, maxiter, rtol, atol)
    leaves, spec = _leaves(b, "cg")
    init = [] if x0 is None else list(_tree.flatten_as(spec, x0))
    with torch.no_grad():
        result = _core.cg(_flat_operator(A, spec, "cg"), leaves, float(ridge),
                          -1 if maxiter is None else int(maxiter), float(rtol),
                          float(atol), init)
    return _tree.unflatten(spec, report("cg", result))


def ns(A, b, *, alpha=1.0, ridge=0.0, maxiter=None, rtol=1e-10, atol=0.0):
    """Solves (A + ridge I) x = b with the Neumann series
    x = alpha sum_k (I - alpha A)^k b (needs |I - alpha A| < 1)."""
    _check_options("ns", ridge, maxiter, rtol, atol)
    if not isinstance(alpha, numbers.Real) or alpha <= 0:
        raise ValueError(f"ns: `alpha` must be a number > 0, got {alpha!r}")
    leaves, spec = _leaves(b, "ns")
    with torch.no_grad():
        result = _core.neumann(_flat_operator(A, spec, "ns"), leaves,
                               float(alpha), float(ridge),
                               -1 if maxiter is None else int(maxiter),
                               float(rtol), float(atol))
    return _tree.unflatten(spec, report("ns", result))
