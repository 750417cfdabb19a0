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

torch.func: on torch >= 2.0 the node is an autograd Function in the form
torch.func transforms (a forward without ctx, setup_context, a generated
vmap rule, a jvp), so ``torch.func.vmap(torch.func.grad(loss_of_solution))``,
jacrev, jacfwd, hessian and their nestings work. Every tensor the
optimality function reads is an input of the node (not a closure), so vmap
batches data arguments too. The backward is itself made of differentiable
torch operations: the linear solve runs as torch operations (linear_solve's
``_metafuse_differentiable`` form) wherever its result must be
differentiable (a backward with create_graph, or under a transform), and
the partial derivatives of the optimality function are taken at the
differentiable solution, so second derivatives include the solution's own
dependence on the arguments. The jvp solves J t = -(dF/dlam) dlam with
reverse-mode products only. On torch 1.13 the node keeps the ctx form, and
calling it under a functorch transform raises a clear error.
"""

import functools
import numbers

import torch

from metafuse import _torch_func
from metafuse import tree as _tree
from metafuse.diff.implicit import linear_solve

__all__ = ["custom_root"]


def _flatten_tensors(value, what):
    leaves, spec = _tree.flatten(value)
    if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise TypeError(f"custom_root: {what} must be a tensor or a pytree of "
                        f"tensors, got {type(value).__name__}")
    return leaves, spec


class _Plan:
    """What the implicit node needs besides tensors (no tensor inside: its
    tensors are the node's inputs, so that torch.func sees them).

    ``residual(solution, metas, others)`` -> the optimality function's value
    as leaves of the solution's structure, from leaf lists."""

    def __init__(self, name, residual, solve, solution_spec, num_meta, num_other):
        self.name = name
        self.residual = residual
        self.solve = solve
        self.solution_spec = solution_spec
        self.num_meta = num_meta
        self.num_other = num_other


def _can_grad(t):
    return t.is_floating_point() or t.is_complex()


def _pullbacks(plan, solution, metas, others):
    """(J^T u, -(dF/dmeta)^T u) as functions of the cotangent leaves u, F
    the optimality function at the solution; differentiable where the
    backward must be (module docstring)."""
    if _torch_func.transforms_active():
        # Partial derivatives at a new functorch level, opened afresh for
        # each product (a pullback kept across calls would be used at a
        # level that is gone when a solver differentiates the product):
        # differentiable in the solution, the metas and u at the levels
        # outside.
        vjp = _torch_func.vjp()
        wanted = [i for i, m in enumerate(metas) if _can_grad(m)]

        def jt(u):
            _, pullback = vjp(lambda *sol: tuple(plan.residual(list(sol), metas, others)),
                              *solution)
            return list(pullback(tuple(u)))

        def meta_grads(u):
            if not wanted:
                return [None] * len(metas)

            # The solution is a primal too: an optimality function that
            # differentiates in x itself (torch.autograd.grad) needs x at the
            # innermost level.
            n = len(solution)

            def residual(*primals):
                met = list(metas)
                for i, t in zip(wanted, primals[n:]):
                    met[i] = t
                return tuple(plan.residual(list(primals[:n]), met, others))
            _, pullback = vjp(residual, *solution, *[metas[i] for i in wanted])
            found = dict(zip(wanted, pullback(tuple(u))[n:]))
            return [-found[i] if i in found else None for i in range(len(metas))]
        return jt, meta_grads
    differentiable = torch.is_grad_enabled()  # the backward records: create_graph
    if differentiable:
        # Partial derivatives through zero perturbations of the (not
        # detached) solution and metas: the graph keeps their own dependence.
        d_sol = [torch.zeros_like(s).requires_grad_() for s in solution]
        d_met = [torch.zeros_like(m).requires_grad_(_can_grad(m)) for m in metas]
        with torch.enable_grad():
            f = plan.residual([s + d for s, d in zip(solution, d_sol)],
                              [m + d if d.requires_grad else m for m, d in zip(metas, d_met)],
                              others)
        sol_in, met_in = d_sol, d_met
    else:
        sol_in = [t.detach().requires_grad_() for t in solution]
        met_in = [t.detach().requires_grad_(_can_grad(t)) for t in metas]
        with torch.enable_grad():
            f = plan.residual(sol_in, met_in, others)
    grad_met = [m for m in met_in if m.requires_grad]

    def jt(u):
        with torch.enable_grad():
            out = torch.autograd.grad(f, sol_in, u, retain_graph=True, create_graph=True,
                                      allow_unused=True)
        return [torch.zeros_like(s) if g is None else g for g, s in zip(out, sol_in)]

    def meta_grads(u):
        if not grad_met:
            return [None] * len(met_in)
        with torch.enable_grad():
            found = iter(torch.autograd.grad(f, grad_met, u, retain_graph=differentiable,
                                             create_graph=differentiable, allow_unused=True))
        grads = [next(found) if m.requires_grad else None for m in met_in]
        return [None if g is None else -g for g in grads]
    return jt, meta_grads


def _implicit_backward(plan, metas, others, solution, cotangents):
    """The gradients of the metas: -(dF/dmeta)^T J^-T v, v the cotangents of
    the solution."""
    spec = plan.solution_spec
    jt, meta_grads = _pullbacks(plan, solution, metas, others)

    def transpose_jacobian(u):  # J^T u, differentiable in u
        return _tree.unflatten(spec, jt(list(_tree.flatten_as(spec, u))))

    v = _tree.unflatten(spec, [torch.zeros_like(s) if c is None else c
                               for c, s in zip(cotangents, solution)])
    solve = plan.solve
    if torch.is_grad_enabled() or _torch_func.transforms_active():
        solve = getattr(solve, "_metafuse_differentiable", solve)
    u = solve(transpose_jacobian, v)
    try:
        u_leaves = list(_tree.flatten_as(spec, u))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{plan.name}: the linear solve must return a pytree with the "
                         f"structure of the solution: {exc}") from None
    return meta_grads(u_leaves)


def _implicit_jvp(plan, metas, others, solution, meta_tangents):
    """The tangents of the solution: J^-1 (-(dF/dmeta) t), t the metas'
    tangents, with reverse-mode products only (forward mode through the
    optimality function is not needed): the transposes come from
    differentiating the pullbacks, which are linear."""
    spec = plan.solution_spec
    vjp = _torch_func.vjp()
    wanted = [i for i, (m, t) in enumerate(zip(metas, meta_tangents))
              if t is not None and _can_grad(m)]
    if not wanted:
        return [torch.zeros_like(s) for s in solution]

    n = len(solution)

    def meta_product(*w):  # (dF/dmeta)^T w on the metas with a tangent
        def residual(*primals):  # (the solution a primal too: see _pullbacks)
            met = list(metas)
            for i, t in zip(wanted, primals[n:]):
                met[i] = t
            return tuple(plan.residual(list(primals[:n]), met, others))
        _, pullback = vjp(residual, *solution, *[metas[i] for i in wanted])
        return tuple(pullback(tuple(w))[n:])

    _, transpose = vjp(meta_product, *[torch.zeros_like(s) for s in solution])
    b = [-t for t in transpose(tuple(meta_tangents[i] for i in wanted))]

    def jt(*u):
        _, pullback = vjp(lambda *sol: tuple(plan.residual(list(sol), metas, others)),
                          *solution)
        return tuple(pullback(tuple(u)))

    def matvec(x):  # J x: the transpose of u -> J^T u
        _, pullback = vjp(jt, *[torch.zeros_like(s) for s in solution])
        return _tree.unflatten(spec, list(pullback(tuple(_tree.flatten_as(spec, x)))))

    solve = getattr(plan.solve, "_metafuse_differentiable", plan.solve)
    x = solve(matvec, _tree.unflatten(spec, b))
    try:
        return list(_tree.flatten_as(spec, x))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{plan.name}: the linear solve must return a pytree with the "
                         f"structure of the solution: {exc}") from None


def _split(plan, tensors):
    m, o = plan.num_meta, plan.num_other
    return list(tensors[:m]), list(tensors[m:m + o]), list(tensors[m + o:])


if _torch_func.FUNCTORCH_FORM:
    class _ImplicitFunction(torch.autograd.Function):
        """inputs: the plan, the meta leaves (differentiated), the other
        tensors the optimality function reads (not differentiated), the
        solution leaves; outputs: the solution, implicitly differentiable."""

        generate_vmap_rule = True

        @staticmethod
        def forward(plan, *inputs):
            return tuple(t.clone() for t in inputs[plan.num_meta + plan.num_other:])

        @staticmethod
        def setup_context(ctx, inputs, output):
            plan = inputs[0]
            ctx.plan = plan
            ctx.save_for_backward(*inputs[1:1 + plan.num_meta + plan.num_other], *output)
            # (forward mode reads the inputs: the solution's values are the last)
            ctx.save_for_forward(*inputs[1:])

        @staticmethod
        def backward(ctx, *cotangents):
            plan = ctx.plan
            metas, others, solution = _split(plan, ctx.saved_tensors)
            grads = _implicit_backward(plan, metas, others, solution, cotangents)
            return (None, *grads) + (None,) * (plan.num_other + len(solution))

        @staticmethod
        def jvp(ctx, *tangents):
            plan = ctx.plan
            metas, others, solution = _split(plan, ctx.saved_tensors)
            return tuple(_implicit_jvp(plan, metas, others, solution,
                                       tangents[1:1 + plan.num_meta]))
else:
    class _ImplicitFunction(torch.autograd.Function):  # torch 1.13: the ctx form
        @staticmethod
        def forward(ctx, plan, *inputs):
            ctx.plan = plan
            outputs = tuple(t.detach().clone() for t in inputs[plan.num_meta + plan.num_other:])
            ctx.save_for_backward(*inputs[:plan.num_meta + plan.num_other], *outputs)
            return outputs

        @staticmethod
        def backward(ctx, *cotangents):
            plan = ctx.plan
            metas, others, solution = _split(plan, ctx.saved_tensors)
            grads = _implicit_backward(plan, metas, others, solution, cotangents)
            return (None, *grads) + (None,) * (plan.num_other + len(solution))


def apply_implicit(plan, metas, others, solution):
    """The implicit node on leaf lists; returns the solution leaves."""
    if not _torch_func.FUNCTORCH_FORM and _torch_func.transforms_active():
        _torch_func.refuse(
            plan.name, f"with torch {torch.__version__} functorch transforms cannot "
            "differentiate an autograd.Function (torch >= 2.0 can); call it outside "
            "the transform and use torch.autograd.grad / .backward(), or loop over "
            "the batch")
    return _ImplicitFunction.apply(plan, *metas, *others, *solution)


def tensor_slots(tree):
    """The tensor leaves of ``tree`` and ``rebuild(tensors)``: the tree
    again with those tensors in their places (other leaves unchanged)."""
    leaves, spec = _tree.flatten(tree)
    where = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]

    def rebuild(tensors):
        filled = list(leaves)
        for i, t in zip(where, tensors):
            filled[i] = t
        return _tree.unflatten(spec, filled)
    return [leaves[i] for i in where], rebuild


def custom_root(optimality_fn, argnums, has_aux=False, solve=None):
    """Decorator making ``solver_fn(x0, *args)`` differentiable w.r.t. the
    arguments in ``argnums`` through ``optimality_fn(x, *args) == 0``.

    ``solve(matvec, b)`` is a linear solver from
    metafuse.diff.implicit.linear_solve (default: solve_normal_cg(), valid for
    any invertible Jacobian; use solve_cg() when the optimality function is
    the gradient of a strictly convex objective). With ``has_aux=True`` the
    solver returns (solution, aux) and aux is passed through.

    The result composes with torch.func.vmap, grad, vjp and jacrev on torch
    >= 2.0 (module docstring)."""
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
        name = f"custom_root ({getattr(solver_fn, '__name__', 'solver')})"

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
            # What the optimality function reads besides the solution and the
            # metas (arguments 1.. not in argnums, keyword arguments): node
            # inputs, not differentiated.
            others, rebuild = tensor_slots(
                ([None if (i == 0 or i in argnums) else a for i, a in enumerate(args)],
                 kwargs))

            def residual(x_leaves, metas, other_tensors):
                call, call_kwargs = rebuild(other_tensors)
                k = 0
                for a, spec, n in meta_specs:
                    call[a] = _tree.unflatten(spec, metas[k:k + n])
                    k += n
                value = optimality_fn(_tree.unflatten(sol_spec, x_leaves), *call[1:],
                                      **call_kwargs)
                try:
                    return list(_tree.flatten_as(sol_spec, value))
                except (ValueError, TypeError) as exc:
                    raise ValueError(
                        "custom_root: the optimality function must return a pytree "
                        f"with the structure of the solution: {exc}") from None

            plan = _Plan(name, residual, solve, sol_spec, len(meta_leaves), len(others))
            results = apply_implicit(plan, meta_leaves, others,
                                     [s.detach() for s in solution])
            result = _tree.unflatten(sol_spec, list(results))
            return (result, aux) if has_aux else result
        return wrapped
    return decorator
