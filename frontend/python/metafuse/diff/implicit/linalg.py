"""Matrix-free linear algebra on pytrees: conjugate gradient and the Neumann
series. The work runs in C++ (metafuse._C._diff); the operator is a callable
applied to pytrees shaped like ``b`` (or a matrix, for a tensor ``b``).

Under a torch.func transform (vmap, grad, jacrev, ...) the same algorithms
run as torch operations instead (``torch_*`` below): C++ reads scalars out
of tensors to decide when to stop, which vmap forbids, and its results
carry no gradient. There a loop runs until every batch entry has reached
the tolerance (entries that have stop changing: the updates are masked),
and the result is differentiable. custom_root's backward uses them too
where its own result must be differentiable (create_graph, or a transform).
"""

import numbers
import warnings

import torch

from metafuse import _C
from metafuse import _torch_func
from metafuse import tree as _tree

_core = _C._diff

__all__ = ["cg", "ns", "ns_inv", "ConvergenceWarning"]


class ConvergenceWarning(UserWarning):
    """A linear solve stopped before reaching its tolerance."""


def _flat_operator(A, spec, name):
    """A callable on pytrees, a matrix (for a tensor ``b``) or a tree of
    matrices shaped like ``b`` (one per leaf, TorchOpt) -> a callable on flat
    leaf lists."""
    if not callable(A) and _tree.leaves(A) and all(
            isinstance(t, torch.Tensor) for t in _tree.leaves(A)):
        if isinstance(A, torch.Tensor):
            matrices = [A]
        else:
            try:
                matrices = list(_tree.flatten_as(spec, A))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{name}: a tree of matrices `A` must have the "
                                 f"structure of `b`: {exc}") from None
        for m in matrices:
            if m.dim() != 2 or m.shape[0] != m.shape[1]:
                raise ValueError(f"{name}: a matrix operator must be square, got "
                                 f"shape {tuple(m.shape)}")
        if len(matrices) == 1 and spec.num_leaves != 1:
            raise ValueError(f"{name}: one matrix `A` needs a tensor `b`")
        return lambda leaves: [(m @ x.reshape(-1)).reshape(x.shape)
                               for m, x in zip(matrices, leaves)]
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
    if ridge is None:  # TorchOpt's "no ridge"
        ridge = 0.0
    if not isinstance(ridge, numbers.Real) or ridge < 0:
        raise ValueError(f"{name}: `ridge` must be a number >= 0, got {ridge!r}")
    if maxiter is not None and (not isinstance(maxiter, numbers.Integral) or maxiter < 1):
        raise ValueError(f"{name}: `maxiter` must be an integer >= 1, got {maxiter!r}")
    for label, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, numbers.Real) or value < 0:
            raise ValueError(f"{name}: `{label}` must be a number >= 0, got {value!r}")
    return float(ridge)


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


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None,
       ridge=0.0):
    """Solves A x = b by (preconditioned) conjugate gradient, A symmetric
    positive definite: a callable on pytrees shaped like ``b``, a matrix, or
    a tree of matrices (one per leaf of ``b``). Stops when ``|residual|`` <=
    max(rtol ``|b|``, atol) or after ``maxiter`` iterations (default: 10 x the
    number of unknowns). ``M`` is a preconditioner approximating A^-1 (same
    forms as A). ``ridge`` (a metafuse extension) solves (A + ridge I) x = b.
    Warns (ConvergenceWarning) with the residual reached if the tolerance is
    not met."""
    ridge = _check_options("cg", ridge, maxiter, rtol, atol)
    leaves, spec = _leaves(b, "cg")
    init = [] if x0 is None else list(_tree.flatten_as(spec, x0))
    precondition = None if M is None else _flat_operator(M, spec, "cg (M)")
    if _torch_func.transforms_active():
        x = torch_cg(_flat_operator(A, spec, "cg"), leaves, init, ridge=ridge,
                     maxiter=maxiter, rtol=rtol, atol=atol, precondition=precondition,
                     name="cg")
        return _tree.unflatten(spec, x)
    with torch.no_grad():
        result = _core.cg(_flat_operator(A, spec, "cg"), leaves, ridge,
                          -1 if maxiter is None else int(maxiter), float(rtol),
                          float(atol), init, precondition)
    return _tree.unflatten(spec, report("cg", result))


def _check_alpha(name, alpha):
    if alpha is None:
        return 1.0
    if not isinstance(alpha, numbers.Real) or alpha <= 0:
        raise ValueError(f"{name}: `alpha` must be a number > 0 or None, got {alpha!r}")
    return float(alpha)


def _check_maxiter(name, maxiter):
    if maxiter is None:
        return 10
    if isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral) \
            or maxiter < 0:
        raise ValueError(f"{name}: `maxiter` must be an integer >= 0, got {maxiter!r}")
    return int(maxiter)


def ns(A, b, maxiter=None, *, alpha=None, ridge=0.0):
    """The Neumann-series approximation of A^-1 b (TorchOpt's ``ns``):
    alpha sum_{k=0..maxiter} (I - alpha A)^k b, exactly ``maxiter`` (default
    10) terms after the first, alpha defaulting to 1. Accurate when the
    spectral radius of I - alpha A is below 1. ``A``: a callable on pytrees
    shaped like ``b``, a matrix, or a tree of matrices (one per leaf)."""
    ridge = _check_options("ns", ridge, None, 0.0, 0.0)
    alpha = _check_alpha("ns", alpha)
    maxiter = _check_maxiter("ns", maxiter)
    leaves, spec = _leaves(b, "ns")
    if maxiter == 0:
        return _tree.unflatten(spec, [alpha * t for t in leaves])
    if _torch_func.transforms_active():
        return _tree.unflatten(spec, torch_neumann(_flat_operator(A, spec, "ns"), leaves,
                                                   alpha, ridge=ridge, maxiter=maxiter))
    with torch.no_grad():
        x, *_ = _core.neumann(_flat_operator(A, spec, "ns"), leaves, alpha,
                              ridge, maxiter, 0.0, 0.0)
    return _tree.unflatten(spec, x)


def ns_inv(A, maxiter=None, *, alpha=None):
    """The Neumann-series approximation of A^-1 for a square matrix, or for
    each matrix of a tree: alpha sum_{k=0..maxiter-1} (I - alpha A)^k
    (TorchOpt's ``ns_inv``; ``maxiter`` defaults to 10, ``alpha`` to 1)."""
    alpha = _check_alpha("ns_inv", alpha)
    maxiter = _check_maxiter("ns_inv", maxiter)
    matrices, spec = _tree.flatten(A)
    out = []
    for m in matrices:
        if not isinstance(m, torch.Tensor) or m.dim() != 2 or m.shape[0] != m.shape[1]:
            raise ValueError("ns_inv: `A` must be a square matrix or a tree of "
                             "them, got "
                             + (f"shape {tuple(m.shape)}" if isinstance(m, torch.Tensor)
                                else type(m).__name__))
        if maxiter == 0:
            out.append(torch.zeros_like(m))
            continue
        # The series applied to the identity's columns, in C++: its first
        # maxiter terms are the (maxiter - 1)-step series.
        eye = torch.eye(m.shape[0], dtype=m.dtype, device=m.device)
        if _torch_func.transforms_active():
            out.append(torch_neumann(lambda leaves, m=m: [m @ leaves[0]], [eye], alpha,
                                     maxiter=maxiter - 1)[0] if maxiter > 1 else alpha * eye)
            continue
        with torch.no_grad():
            x, *_ = _core.neumann(lambda leaves, m=m: [m @ leaves[0]], [eye],
                                  alpha, 0.0, maxiter - 1, 0.0, 0.0) \
                if maxiter > 1 else ([alpha * eye],)
        out.append(x[0])
    return _tree.unflatten(spec, out)


# --- the same algorithms as torch operations (module docstring) -------------

def _vdot(a, b):
    """The inner product over all leaves: a 0-dim tensor (one per batch
    entry under vmap)."""
    total = None
    for x, y in zip(a, b):
        term = (x.reshape(-1) * y.reshape(-1)).sum()
        total = term if total is None else total + term
    return total


def _apply(op, x, ridge):
    """(A + ridge I) x on leaf lists."""
    y = op(x)
    if len(y) != len(x):
        raise ValueError(f"the operator returned {len(y)} leaves for {len(x)}")
    return [yi + ridge * xi for yi, xi in zip(y, x)] if ridge else list(y)


def _unknowns(b):
    return sum(t.numel() for t in b)


def _where(flag, new, old):
    return [torch.where(flag, n, o) for n, o in zip(new, old)]


def _warn_unconverged(name, converged, iterations):
    if not _torch_func.all_true(converged):
        warnings.warn(f"{name} did not converge: the residual is above its target "
                      f"after {iterations} iteration(s)", ConvergenceWarning, stacklevel=4)


def torch_cg(op, b, init=None, *, ridge=0.0, maxiter=None, rtol=1e-10, atol=0.0,
             precondition=None, name="cg"):
    """Conjugate gradient on leaf lists (``op``: leaves -> leaves), as
    torch operations: C++ cg's iteration and tolerance (``|residual|`` <=
    max(rtol ``|b|``, atol), at most ``maxiter`` iterations, default 10 x the
    unknowns, a breakdown p^T A p <= 0 stops), with each batch entry's
    updates masked once it stops. Differentiable; runs under vmap."""
    limit = maxiter if maxiter is not None else max(10 * _unknowns(b), 1)
    x = [torch.zeros_like(t) for t in b] if not init else list(init)
    r = [bi - ai for bi, ai in zip(b, _apply(op, x, ridge))]

    def prec(v):
        return list(precondition(v)) if precondition is not None else v

    z = prec(r)
    p = z
    rz = _vdot(r, z)
    target = torch.clamp(rtol * _vdot(b, b).clamp(min=0).sqrt(), min=atol)
    active = _vdot(r, r).clamp(min=0).sqrt() > target
    done = 0
    while done < limit and not _torch_func.all_true(~active):
        ap = _apply(op, p, ridge)
        pap = _vdot(p, ap)
        active = active & (pap > 0)  # a breakdown: A is not positive definite here
        one = torch.ones_like(pap)
        alpha = torch.where(active, rz / torch.where(active, pap, one), torch.zeros_like(pap))
        x = [xi + alpha * pi for xi, pi in zip(x, p)]
        r = [ri - alpha * api for ri, api in zip(r, ap)]
        z = prec(r)
        rz_next = _vdot(r, z)
        beta = torch.where(active, rz_next / torch.where(active, rz, one),
                           torch.zeros_like(rz))
        p = _where(active, [zi + beta * pi for zi, pi in zip(z, p)], p)
        rz = torch.where(active, rz_next, rz)
        active = active & (_vdot(r, r).clamp(min=0).sqrt() > target)
        done += 1
    _warn_unconverged(name, _vdot(r, r).clamp(min=0).sqrt() <= target, done)
    return x


def torch_normal_cg(op, op_t, b, init=None, *, ridge=0.0, maxiter=None, rtol=1e-10,
                    atol=0.0, name="normal_cg"):
    """CG on the normal equations (A^T A + ridge I) x = A^T b, as torch
    operations (``op_t`` applies A^T)."""
    return torch_cg(lambda v: op_t(op(v)), list(op_t(b)), init, ridge=ridge,
                    maxiter=maxiter, rtol=rtol, atol=atol, name=name)


def torch_neumann(op, b, alpha, *, ridge=0.0, maxiter=10, rtol=None, atol=0.0,
                  name="ns"):
    """alpha sum_k (I - alpha (A + ridge I))^k b as torch operations:
    ``maxiter`` terms after the first; with ``rtol``, each batch entry stops
    adding terms once a term is below alpha max(rtol ``|b|``, atol)."""
    term = [alpha * t for t in b]
    x = list(term)
    if rtol is None:
        for _ in range(maxiter):
            term = [t - alpha * a for t, a in zip(term, _apply(op, term, ridge))]
            x = [xi + ti for xi, ti in zip(x, term)]
        return x
    target = torch.clamp(rtol * _vdot(b, b).clamp(min=0).sqrt(), min=atol)
    active = torch.ones_like(target, dtype=torch.bool)
    done = 0
    while done < maxiter and not _torch_func.all_true(~active):
        term = [t - alpha * a for t, a in zip(term, _apply(op, term, ridge))]
        x = _where(active, [xi + ti for xi, ti in zip(x, term)], x)
        active = active & (_vdot(term, term).clamp(min=0).sqrt() > alpha * target)
        done += 1
    residual = [bi - ai for bi, ai in zip(b, _apply(op, x, ridge))]
    _warn_unconverged(name, _vdot(residual, residual).clamp(min=0).sqrt() <= target, done)
    return x


def torch_dense(op, b, *, ridge=0.0, name="inv"):
    """Forms A + ridge I (one matvec per unknown) and solves with LU, as
    torch operations (torch.linalg.solve)."""
    n = _unknowns(b)
    if n > 20000:
        raise ValueError(f"{name}: {n} unknowns is too many to form the matrix; use "
                         "cg or normal_cg")
    sizes = [t.numel() for t in b]
    flat_b = torch.cat([t.reshape(-1) for t in b])
    eye = torch.eye(n, dtype=flat_b.dtype, device=flat_b.device)
    columns = []
    for j in range(n):
        unit = list(torch.split(eye[j], sizes))
        image = _apply(op, [u.reshape(t.shape) for u, t in zip(unit, b)], ridge)
        columns.append(torch.cat([t.reshape(-1) for t in image]))
    x = torch.linalg.solve(torch.stack(columns, dim=1), flat_b)
    return [piece.reshape(t.shape) for piece, t in zip(torch.split(x, sizes), b)]
