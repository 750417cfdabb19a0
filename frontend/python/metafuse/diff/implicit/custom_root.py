"""custom_root: differentiate a solver through its optimality condition.

    def optimality(x, lam, data):          # F(x, lam, data) = 0 at the solution
        return grad_of_inner_objective(x, lam, data)

    @custom_root(optimality, argnums=1)
    def solve(x0, lam, data):             # any solver, differentiable or not
        ...
        return x_star

    x_star = solve(x0, lam, data)         # differentiable w.r.t. lam

By the implicit function theorem, with J = dF/dx at the solution, the
cotangent v of x_star becomes u = J^-T v (one linear solve, matrix-free,
with autograd vector products) and lam receives -(dF/dlam)^T u. ``argnums``
count the solver's arguments; 0 (the initial guess) is never differentiated.
"""

import functools
import numbers

import torch

from metafuse import tree as _tree
from metafuse.diff.implicit import linear_solve

__all__ = ["custom_root"]


def _flatten_tensors(value, what):
    leaves, spec = _tree.flatten(value)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise TypeError(f"custom_root: {what} must be a tensor or a pytree of "
                        f"tensors, got {type(value).__name__}")
    return leaves, spec


class _ImplicitFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan, *inputs):
        ctx.plan = plan
        # inputs = meta leaves (differentiated), then the solution leaves.
        return tuple(t.detach().clone() for t in inputs[plan["num_meta"]:])

    @staticmethod
    def backward(ctx, *cotangents):
        plan = ctx.plan
        solution = [t.detach().requires_grad_() for t in plan["solution"]]
        metas = [t.detach().requires_grad_() for t in plan["meta_leaves"]]
        sol_spec = plan["solution_spec"]
        with torch.enable_grad():
            residual = plan["optimality"](_tree.unflatten(sol_spec, solution), metas)
            try:
                f_leaves = list(_tree.flatten_as(sol_spec, residual))
            except (ValueError, TypeError) as exc:
                raise ValueError(
                    "custom_root: the optimality function must return a pytree "
                    f"with the structure of the solution: {exc}") from None

        def transpose_jacobian(u):  # J^T u, differentiable in u
            u_leaves = list(_tree.flatten_as(sol_spec, u))
            with torch.enable_grad():
                out = torch.autograd.grad(f_leaves, solution, u_leaves,
                                          retain_graph=True, create_graph=True,
                                          allow_unused=True)
            return _tree.unflatten(sol_spec, [torch.zeros_like(s) if g is None else g
                                              for g, s in zip(out, solution)])

        v = _tree.unflatten(sol_spec, [torch.zeros_like(s) if c is None else c
                                       for c, s in zip(cotangents, solution)])
        u = plan["solve"](transpose_jacobian, v)
        u_leaves = list(_tree.flatten_as(sol_spec, u))
        with torch.enable_grad():
            grads = torch.autograd.grad(f_leaves, metas, u_leaves,
                                        allow_unused=True)
        meta_grads = tuple(None if g is None else -g for g in grads)
        return (None,) + meta_grads + (None,) * len(solution)


def custom_root(optimality_fn, argnums, has_aux=False, solve=None):
    """Decorator making ``solver_fn(x0, *args)`` differentiable w.r.t. the
    arguments in ``argnums`` through ``optimality_fn(x, *args) == 0``.

    ``solve(matvec, b)`` is a linear solver from
    metafuse.diff.implicit.linear_solve (default: solve_normal_cg(), valid for
    any invertible Jacobian; use solve_cg() when the optimality function is
    the gradient of a strictly convex objective). With ``has_aux=True`` the
    solver returns (solution, aux) and aux is passed through."""
    if not callable(optimality_fn):
        raise TypeError("custom_root: `optimality_fn` must be callable")
    argnums = (argnums,) if isinstance(argnums, numbers.Integral) else tuple(argnums)
    if not argnums or not all(isinstance(a, numbers.Integral) for a in argnums):
        raise ValueError(f"custom_root: `argnums` must be integers, got {argnums!r}")
    if any(a < 1 for a in argnums):
        raise ValueError("custom_root: `argnums` count the solver's arguments and "
                         "must be >= 1: argument 0 is the initial guess, which "
                         f"is not differentiated; got {argnums!r}")
    solve = linear_solve.solve_normal_cg() if solve is None else solve
    if not callable(solve):
        raise TypeError("custom_root: `solve` must be a linear solver, e.g. "
                        "linear_solve.solve_cg()")

    def decorator(solver_fn):
        @functools.wraps(solver_fn)
        def wrapped(*args, **kwargs):
            # Keyword arguments reach the solver and the optimality function
            # unchanged; they are not differentiated (TorchOpt).
            if max(argnums) >= len(args):
                raise ValueError(f"custom_root: argnums {argnums} out of range for "
                                 f"{len(args)} solver argument(s)")
            with torch.no_grad():
                out = solver_fn(*args, **kwargs)
            aux = None
            if has_aux:
                if not isinstance(out, tuple) or len(out) != 2:
                    raise TypeError("custom_root: with has_aux=True the solver "
                                    "must return (solution, aux)")
                out, aux = out
            solution, sol_spec = _flatten_tensors(out, "the solver's result")
            meta_leaves, meta_specs = [], []
            for a in argnums:
                leaves, spec = _flatten_tensors(args[a], f"argument {a}")
                meta_specs.append((a, spec, len(leaves)))
                meta_leaves.extend(leaves)

            def optimality(x, metas):
                call = list(args)
                k = 0
                for a, spec, n in meta_specs:
                    call[a] = _tree.unflatten(spec, metas[k:k + n])
                    k += n
                return optimality_fn(x, *call[1:], **kwargs)

            plan = {"num_meta": len(meta_leaves), "solution": [s.detach() for s in solution],
                    "solution_spec": sol_spec, "meta_leaves": meta_leaves,
                    "optimality": optimality, "solve": solve}
            results = _ImplicitFunction.apply(plan, *meta_leaves, *solution)
            result = _tree.unflatten(sol_spec, list(results))
            return (result, aux) if has_aux else result
        return wrapped
    return decorator
