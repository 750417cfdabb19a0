"""Python entry points of metafuse's fused operators (torch.ops.metafuse.*).

torch.func: the out-of-place single-tensor operators (ema_update and the
fused steps ``adam``, ``sgd``, ...) are elementwise, and on torch >= 2.4
each has a batching rule registered here (torch.library.register_vmap), so
torch.func.vmap runs them as one call on the batch. Their backward is a C++
autograd node, which torch.func.grad, vjp, jacrev and jvp cannot
differentiate: these entry points raise TorchFuncUnsupportedError under
those (the multi-tensor operators too); differentiate them with
torch.autograd.grad outside the transform, or use the optimizers with
fused=False (the same numbers) under torch.func. The multi-tensor
operators have no batching rule (torch's error names the operator).
"""

import torch

from metafuse import _C  # noqa: F401  (registers torch.ops.metafuse)
from metafuse import _torch_func


def _refuse_differentiating(name):
    if _torch_func.differentiating_transforms_active():
        _torch_func.refuse(
            f"metafuse.ops.{name}",
            "the fused operator's backward is a C++ autograd node, which "
            "torch.func.grad, vjp, jacrev and jvp cannot differentiate; "
            "differentiate it with torch.autograd.grad outside the transform, or "
            "under torch.func use the optimizers with fused=False (metafuse.adam(..., "
            "fused=False) and so on: the same numbers)")


def ema_update(moment: torch.Tensor, update: torch.Tensor, decay: float,
               order: int = 1) -> torch.Tensor:
    """Fused exponential moving average of ``update**order``.

    One pass over memory, differentiable to any order with respect to
    ``moment`` and ``update`` (the backward is the exact closed form).

    Args:
        moment: the running average.
        update: the new value, the shape of ``moment``.
        decay: the weight of the old average, in [0, 1].
        order: 1 for a first moment (Adam's mu), 2 for a second moment
            (Adam's nu).

    Returns:
        ``decay * moment + (1 - decay) * update**order``, a new tensor.
    """
    if not isinstance(moment, torch.Tensor):
        raise TypeError(f"ema_update: `moment` must be a torch.Tensor, got "
                        f"{type(moment).__name__}")
    if not isinstance(update, torch.Tensor):
        raise TypeError(f"ema_update: `update` must be a torch.Tensor, got "
                        f"{type(update).__name__}")
    _refuse_differentiating("ema_update")
    return torch.ops.metafuse.ema_update(moment, update, float(decay),
                                         int(order))


# --- fused optimizer steps (kernels/optimizers.h) ---------------------------
#
# Each returns (update, *new_states); apply with param + update. The C++
# operator checks shapes, dtypes, options and says what was wrong; these
# wrappers only check that tensor arguments are tensors (or lists of them)
# before they reach the dispatcher, whose own message would not name them.

def _check_args(name, schema, args, kwargs):
    for i, (arg, value) in enumerate(zip(schema.arguments, args)):
        _check_one(name, arg, value)
    by_name = {a.name: a for a in schema.arguments}
    for key, value in kwargs.items():
        if key not in by_name:
            raise TypeError(f"{name}: unexpected argument `{key}`; expected "
                            f"one of {[a.name for a in schema.arguments]}")
        _check_one(name, by_name[key], value)


def _check_one(name, arg, value):
    kind = str(arg.type)
    if kind in ("Tensor", "Optional[Tensor]"):
        if value is None and kind == "Optional[Tensor]":
            return
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}: `{arg.name}` must be a torch.Tensor"
                            f"{' or None' if kind != 'Tensor' else ''}, got "
                            f"{type(value).__name__}")
    elif kind == "List[Tensor]":
        if not isinstance(value, (list, tuple)) or not all(
                isinstance(t, torch.Tensor) for t in value):
            raise TypeError(f"{name}: `{arg.name}` must be a list of "
                            f"torch.Tensor (empty for none), got "
                            f"{type(value).__name__}")


def _fused_step(name):
    packet = getattr(torch.ops.metafuse, name)
    schema = packet.default._schema

    def call(*args, **kwargs):
        _check_args(name, schema, args, kwargs)
        _refuse_differentiating(name)
        return packet(*args, **kwargs)

    call.__name__ = name
    call.__qualname__ = name
    base = name.split("_multi")[0]
    if name.endswith("_multi_"):
        what = (f"In-place fused {base} step over lists of tensors: params += "
                f"update and the states overwritten, one parallel pass. Not "
                f"differentiable (use {base}_multi for that).")
    else:
        what = (f"Fused {base} step"
                f"{' over lists of tensors (one parallel pass)' if name.endswith('_multi') else ''}"
                f"; returns the update and the new states (param + update is "
                f"the new parameter). Differentiable to any order (exact "
                f"closed-form backward).")
    call.__doc__ = (f"{what} See docs/kernels.md.\n\n"
                    f"    ``torch.ops.metafuse.{schema}``")
    return call


_FUSED_STEPS = ("adam", "sgd", "rmsprop", "adagrad", "adamax", "adadelta",
                "radam")
for _name in _FUSED_STEPS:
    globals()[_name] = _fused_step(_name)
    globals()[_name + "_multi"] = _fused_step(_name + "_multi")
    # In place: params += update and states overwritten (not differentiable).
    globals()[_name + "_multi_"] = _fused_step(_name + "_multi_")
del _name


def adamw(grad, mu, nu, param, *, count, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8,
          eps_root=0.0, weight_decay=1e-2, maximize=False):
    """Fused AdamW step: adam() with decoupled weight decay (default 1e-2,
    as torch.optim.AdamW). Returns (update, mu, nu)."""
    return adam(grad, mu, nu, param, count=count, lr=lr, b1=b1, b2=b2,  # noqa: F821
                eps=eps, eps_root=eps_root, weight_decay=weight_decay,
                decoupled_weight_decay=True, maximize=maximize)


def adamw_multi(grads, mus, nus, params, *, count, lr=1e-3, b1=0.9, b2=0.999,
                eps=1e-8, eps_root=0.0, weight_decay=1e-2, maximize=False):
    """Fused AdamW over lists of tensors. Returns (updates, mus, nus)."""
    return adam_multi(grads, mus, nus, params, count=count, lr=lr, b1=b1,  # noqa: F821
                      b2=b2, eps=eps, eps_root=eps_root,
                      weight_decay=weight_decay, decoupled_weight_decay=True,
                      maximize=maximize)


# --- batching rules (torch >= 2.4; module docstring) ------------------------

def _elementwise_rule(packet):
    """The batching rule of an elementwise operator: every tensor argument
    with the batch dimension first (a shared one expanded to the batch),
    one call, every output batched at 0 (None stays None)."""
    def rule(info, in_dims, *args, **kwargs):
        size = info.batch_size
        physical = []
        for arg, dim in zip(args, in_dims):
            if isinstance(arg, torch.Tensor):
                arg = (arg.movedim(dim, 0) if dim is not None
                       else arg.expand(size, *arg.shape)).contiguous()
            physical.append(arg)
        out = packet(*physical, **kwargs)
        if isinstance(out, torch.Tensor):
            return out, 0
        return out, tuple(None if o is None else 0 for o in out)
    return rule


def _register_batching_rules():
    register = getattr(torch.library, "register_vmap", None)
    if register is None:
        return
    for name in ("ema_update",) + _FUSED_STEPS:
        try:
            register(f"metafuse::{name}",
                     _elementwise_rule(getattr(torch.ops.metafuse, name).default))
        except RuntimeError:  # registered already (the package loaded twice)
            pass


_register_batching_rules()
