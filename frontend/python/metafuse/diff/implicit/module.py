"""ImplicitMetaGradientModule: an inner problem as an nn.Module.

    class InnerNet(ImplicitMetaGradientModule, linear_solve=solve_cg()):
        def __init__(self, meta_net, lam):
            super().__init__()
            self.meta_net = meta_net          # meta: a module passed in
            self.lam = lam                    # meta: a tensor passed in
            self.head = torch.nn.Linear(...)  # inner: created here

        def objective(self, x, y):            # or optimality(self, x, y)
            return loss(self.head(self.meta_net(x)), y) + self.lam * ...

        def solve(self, x, y):                # moves the inner parameters
            ...                               # to the solution, in place
            return self

    inner = InnerNet(meta_net, lam).solve(x, y)
    outer_loss(inner(x_val), y_val).backward()  # implicit meta-gradients

Meta-parameters are found automatically: every tensor requiring grad and
every parameter of every nn.Module passed to the constructor (buffers, e.g.
of BatchNorm in eval mode, are constants). It is a
:class:`metafuse.nn.MetaGradientModule`: those are kept apart, so
``parameters()`` lists the inner parameters only (e.g. for an inner
optimizer) and ``meta_parameters()`` the meta ones. After ``solve`` the inner
parameters are replaced by tensors whose backward is the implicit gradient
(custom_root).

As in TorchOpt, a subclass without ``optimality`` or ``objective`` is a
TypeError when it is defined, and ``solve`` on a module without inner
parameters or without meta-parameters is a RuntimeError.

torch.func (torch >= 2.0): the implicit node is custom_root's, so
torch.func.grad, vjp, jacrev and their nestings differentiate through
``solve`` (the tensors the transform differentiates require grad inside it
and are found as meta-parameters; ``solve``'s tensor arguments are node
inputs). Forward mode and vmap alone mark no tensor as requiring grad, so
no meta-parameter is found (the RuntimeError says so); and vmap cannot run
a ``solve`` that writes batched values into the module's parameters in
place (torch's in-place batching error). custom_root covers those.
"""

import inspect

import functools

import torch

from metafuse import _torch_func
from metafuse import tree as _tree
from metafuse.diff.implicit import linear_solve as _linear_solve
from metafuse.diff.implicit.custom_root import _Plan, apply_implicit, tensor_slots
from metafuse._meta_module import MetaGradientModule

__all__ = ["ImplicitMetaGradientModule"]


def _meta_candidates(values):
    """Tensors requiring grad and modules among constructor arguments."""
    found = []
    for leaf in _tree.leaves(values, is_leaf=lambda x: isinstance(x, torch.nn.Module)):
        if isinstance(leaf, torch.nn.Module):
            found.extend(p for p in leaf.parameters() if p.requires_grad)
        elif isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            found.append(leaf)
    return found


def _check_method(cls, name):
    static = inspect.getattr_static(cls, name, None)
    if static is None:
        return False
    if isinstance(static, staticmethod):
        raise TypeError(f"method {name}() must not be a staticmethod.")
    if isinstance(static, classmethod):
        raise TypeError(f"method {name}() must not be a classmethod.")
    if not callable(static):
        raise TypeError(f"method {name}() must be callable.")
    return True


class ImplicitMetaGradientModule(MetaGradientModule):
    """An inner problem as an nn.Module whose solution is differentiated
    implicitly: subclass it with ``objective`` (or ``optimality``) and
    ``solve`` methods, optionally ``linear_solve=`` a solver of
    metafuse.diff.implicit.linear_solve (see the module docstring)."""

    _linear_solve = None

    def __new__(cls, *args, **kwargs):
        if not callable(getattr(cls, "solve", None)):
            raise TypeError(f"Can't instantiate abstract class {cls.__name__} with "
                            "abstract method solve")
        return super().__new__(cls, *args, **kwargs)

    def __init_subclass__(cls, linear_solve=None, **kwargs):
        super().__init_subclass__(**kwargs)
        if not (_check_method(cls, "optimality") or _check_method(cls, "objective")):
            raise TypeError(f"{cls.__name__}: ImplicitMetaGradientModule requires "
                            "either an optimality() method or an objective() method")
        if "objective" in cls.__dict__ and not _check_method(cls, "optimality"):
            cls.optimality = _optimality_from_objective
        if linear_solve is not None:
            if not callable(linear_solve):
                raise TypeError(f"{cls.__name__}: `linear_solve` must be a solver "
                                "from metafuse.diff.implicit.linear_solve")
            cls._linear_solve = linear_solve
        if "__init__" in cls.__dict__:
            user_init = cls.__dict__["__init__"]

            @functools.wraps(user_init)
            def __init__(self, *args, **kw):
                user_init(self, *args, **kw)
                # The outermost __init__ decides: it saw every argument.
                if not getattr(self, "_meta_recorded", False):
                    object.__setattr__(self, "_meta_recorded", True)
                    object.__setattr__(self, "_meta_ids",
                                       {id(t) for t in _meta_candidates((args, kw))})
            cls.__init__ = __init__
        if "solve" in cls.__dict__:
            user_solve = cls.__dict__["solve"]

            @functools.wraps(user_solve)
            def solve(self, *args, **kw):
                return _solve(self, user_solve, args, kw)
            cls.solve = solve

    # -- slots: every place a tensor sits in the module tree -----------------
    def _slots(self):
        slots = []
        seen = set()

        def visit(root):
            for module in root.modules():
                if id(module) in seen:
                    continue
                seen.add(id(module))
                for name, value in module._parameters.items():
                    if value is not None:
                        slots.append((module._parameters, name, value))
                metas = module.__dict__.get("_meta_parameters", {})
                for name, value in metas.items():
                    if value is not None:
                        slots.append((metas, name, value))
                for name, value in vars(module).items():
                    if isinstance(value, torch.Tensor) and not name.startswith("_"):
                        slots.append((vars(module), name, value))
                for meta_module in module.__dict__.get("_meta_modules", {}).values():
                    if meta_module is not None:
                        visit(meta_module)
        visit(self)
        return slots


def _check_parameters(module, meta, inner):
    name = type(module).__name__
    if not inner:
        raise RuntimeError(f"{name}: The module has no parameters (inner "
                           "nn.Parameters created in the module, not passed to "
                           "its constructor).")
    if not meta:
        hint = ""
        if _torch_func.transforms_active():
            hint = (" Under torch.func, the tensors a reverse-mode transform (grad, vjp, "
                    "jacrev) differentiates require grad and are found; forward mode "
                    "(jvp, jacfwd) and vmap alone make none: use custom_root there.")
        raise RuntimeError(f"{name}: The module has no meta-parameters (tensors "
                           "requiring grad or modules passed to its constructor)." + hint)


def _optimality_from_objective(self, *args, **kwargs):
    """The optimality condition of a module that defines ``objective``: the
    gradient of the objective in the inner parameters (a tuple, in the order
    of the inner parameters), differentiable (TorchOpt's automatic
    optimality)."""
    meta, inner = _partition(self)
    _check_parameters(self, meta, inner)
    value = type(self).objective(self, *args, **kwargs)
    params = [p for _, _, p in inner]
    grads = torch.autograd.grad(value, params, create_graph=True, allow_unused=True)
    return tuple(torch.zeros_like(p) if g is None else g for g, p in zip(grads, params))


_optimality_from_objective.from_objective = True


def _partition(module):
    """(meta slots, inner slots) in a stable order."""
    meta_ids = getattr(module, "_meta_ids", set())
    originals = getattr(module, "_implicit_originals", {})
    meta, inner = [], []
    # Parameters: nn.Parameters, and tensors requiring grad registered as
    # parameters (a MetaGradientModule accepts them, as TorchOpt's does).
    parameter_dicts = {id(m._parameters) for m in module.modules()}
    for container, name, value in module._slots():
        original = originals.get((id(container), name), (None, None, value))[2]
        if id(original) in meta_ids:
            meta.append((container, name, original))
        elif original.requires_grad and (isinstance(original, torch.nn.Parameter)
                                          or id(container) in parameter_dicts):
            inner.append((container, name, original))
    return meta, inner


def _solve(module, user_solve, args, kwargs):
    name = type(module).__name__
    has_optimality = callable(getattr(type(module), "optimality", None)) and \
        not getattr(type(module).optimality, "from_objective", False)
    has_objective = callable(getattr(type(module), "objective", None))
    if not (has_optimality or has_objective):
        raise TypeError(f"{name} must define optimality(self, ...) or "
                        "objective(self, ...)")
    # Put the inner Parameters back (a previous solve replaced them).
    originals = getattr(module, "_implicit_originals", {})
    for _, (container, key, param) in originals.items():
        container[key] = param
    object.__setattr__(module, "_implicit_originals", {})
    meta, inner = _partition(module)
    _check_parameters(module, meta, inner)
    result = user_solve(module, *args, **kwargs)
    solution = [p.detach().clone() for _, _, p in inner]
    meta_tensors = [t for _, _, t in meta]

    # The tensors among solve's arguments are node inputs (torch.func sees
    # them); the optimality condition reads them from there.
    others, rebuild = tensor_slots((list(args), kwargs))

    def residual(x_leaves, metas, other_tensors):
        call_args, call_kwargs = rebuild(other_tensors)
        saved = [(c, k, c[k]) for c, k, _ in meta + inner]
        try:
            for (c, k, _), t in zip(meta, metas):
                c[k] = t
            for (c, k, _), t in zip(inner, x_leaves):
                c[k] = t
            if has_optimality:
                value = type(module).optimality(module, *call_args, **call_kwargs)
            else:
                value = type(module).objective(module, *call_args, **call_kwargs)
                if not isinstance(value, torch.Tensor) or value.numel() != 1:
                    raise ValueError(f"{name}.objective must return a scalar tensor")
                grads = torch.autograd.grad(value, x_leaves, create_graph=True,
                                            allow_unused=True)
                value = [torch.zeros_like(t) if g is None else g
                         for g, t in zip(grads, x_leaves)]
        finally:
            for c, k, v in saved:
                c[k] = v
        try:
            return list(_tree.flatten_as(spec, value))
        except (ValueError, TypeError) as exc:
            raise ValueError(
                "custom_root: the optimality function must return a pytree "
                f"with the structure of the solution: {exc}") from None

    solve = type(module)._linear_solve or _linear_solve.solve_normal_cg()
    spec = _tree.structure(list(solution))
    plan = _Plan(f"{name}.solve (ImplicitMetaGradientModule)", residual, solve, spec,
                 len(meta_tensors), len(others))
    outputs = apply_implicit(plan, meta_tensors, others, solution)
    replaced = {}
    for (container, key, param), out in zip(inner, outputs):
        replaced[(id(container), key)] = (container, key, param)
        container[key] = out
    object.__setattr__(module, "_implicit_originals", replaced)
    return module if result is None else result
