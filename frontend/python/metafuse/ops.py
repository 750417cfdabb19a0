"""Python entry points of metafuse's fused operators (torch.ops.metafuse.*)."""

import torch

from metafuse import _C  # noqa: F401  (registers torch.ops.metafuse)


def ema_update(moment: torch.Tensor, update: torch.Tensor, decay: float,
               order: int = 1) -> torch.Tensor:
    """Fused exponential moving average of ``update**order``.

    Returns ``decay * moment + (1 - decay) * update**order`` in one pass over
    memory. ``order`` is 1 for a first moment (Adam's mu) and 2 for a second
    moment (Adam's nu). Differentiable to any order with respect to ``moment``
    and ``update``: the backward is the exact closed form.
    """
    if not isinstance(moment, torch.Tensor):
        raise TypeError(f"ema_update: `moment` must be a torch.Tensor, got "
                        f"{type(moment).__name__}")
    if not isinstance(update, torch.Tensor):
        raise TypeError(f"ema_update: `update` must be a torch.Tensor, got "
                        f"{type(update).__name__}")
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
                    f"    torch.ops.metafuse.{schema}")
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
