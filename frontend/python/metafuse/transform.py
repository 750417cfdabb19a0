"""The building blocks of optimizers (Optax / TorchOpt names and meaning).

Each function returns a GradientTransformation implemented in C++.
"""

import numbers

import torch

from metafuse import _C
from metafuse import tree as _tree
from metafuse.base import GradientTransformation, chain, identity  # noqa: F401

_core = _C._optim

__all__ = [
    "scale", "scale_by_schedule", "flip_sign", "scale_by_adam",
    "scale_by_accelerated_adam",
    "scale_by_adamax", "scale_by_radam", "scale_by_adadelta", "scale_by_rms",
    "scale_by_rss", "scale_by_stddev", "trace", "add_decayed_weights",
    "masked", "nan_to_num", "clip_grad_norm", "chain", "identity",
]


def _number(value, name, low=None, high=None, high_open=False):
    if isinstance(value, torch.Tensor) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}")
    value = float(value)
    if low is not None and value < low:
        raise ValueError(f"`{name}` must be >= {low}, got {value}")
    if high is not None and (value >= high if high_open else value > high):
        bound = f"< {high}" if high_open else f"<= {high}"
        raise ValueError(f"`{name}` must be {bound}, got {value}")
    return value


def _betas(betas):
    try:
        b1, b2 = betas
    except (TypeError, ValueError):
        raise ValueError(f"`betas` must be a pair (b1, b2), got {betas!r}") from None
    return (_number(b1, "betas[0]", 0.0, 1.0, high_open=True),
            _number(b2, "betas[1]", 0.0, 1.0, high_open=True))


def scale(step_size):
    """updates * step_size (a number or a tensor, e.g. a learned rate)."""
    if not isinstance(step_size, torch.Tensor):
        step_size = _number(step_size, "step_size")
    return GradientTransformation(_core.scale(step_size))


def scale_by_schedule(step_size_fn):
    """updates * step_size_fn(count), count = 0 at the first update."""
    if not callable(step_size_fn):
        raise TypeError("`step_size_fn` must be a callable of the step count")
    from metafuse.schedule import unwrap
    return GradientTransformation(_core.scale_by_schedule(unwrap(step_size_fn)))


def flip_sign():
    """-updates (turns descent into ascent)."""
    return GradientTransformation(_core.flip_sign())


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0,
                  moment_requires_grad=False, *, amsgrad=False):
    """mu_hat / (sqrt(nu_hat + eps_root) + eps), bias-corrected moments;
    ``amsgrad`` uses the running maximum of nu."""
    b1, b2 = _betas((b1, b2))
    return GradientTransformation(_core.scale_by_adam(
        b1, b2, _number(eps, "eps", 0.0), _number(eps_root, "eps_root", 0.0),
        bool(moment_requires_grad), bool(amsgrad)))


def scale_by_accelerated_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0,
                              moment_requires_grad=False):
    """TorchOpt's name for Adam's preconditioner run by its fused operator.
    Here it is :func:`scale_by_adam` (the same numbers, one C++
    implementation); the whole fused update is ``adam(...,
    use_accelerated_op=True)``."""
    return scale_by_adam(b1, b2, eps, eps_root, moment_requires_grad)


def scale_by_adamax(b1=0.9, b2=0.999, eps=1e-6, moment_requires_grad=False):
    """mu_hat / max(b2 * nu, ``|g|`` + eps) (torch.optim.Adamax's rule;
    TorchOpt's default eps=1e-6)."""
    b1, b2 = _betas((b1, b2))
    return GradientTransformation(_core.scale_by_adamax(
        b1, b2, _number(eps, "eps", 0.0), bool(moment_requires_grad)))


def scale_by_radam(b1=0.9, b2=0.999, eps=1e-6, moment_requires_grad=False, *,
                   threshold=5.0):
    """Rectified Adam (torch.optim.RAdam's rule; TorchOpt's default
    eps=1e-6)."""
    b1, b2 = _betas((b1, b2))
    return GradientTransformation(_core.scale_by_radam(
        b1, b2, _number(eps, "eps", 0.0), _number(threshold, "threshold"),
        bool(moment_requires_grad)))


def scale_by_adadelta(rho=0.9, eps=1e-6, moment_requires_grad=False):
    """sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g (torch.optim.Adadelta)."""
    return GradientTransformation(_core.scale_by_adadelta(
        _number(rho, "rho", 0.0, 1.0), _number(eps, "eps", 0.0),
        bool(moment_requires_grad)))


def scale_by_rms(alpha=0.9, eps=1e-8, initial_scale=0.0):
    """g / (sqrt(E[g^2]) + eps) (RMSProp)."""
    return GradientTransformation(_core.scale_by_rms(
        _number(alpha, "alpha", 0.0, 1.0), _number(eps, "eps", 0.0),
        _number(initial_scale, "initial_scale", 0.0)))


def scale_by_stddev(alpha=0.9, eps=1e-8, initial_scale=0.0):
    """g / (sqrt(E[g^2] - E[g]^2) + eps) (centered RMSProp)."""
    return GradientTransformation(_core.scale_by_stddev(
        _number(alpha, "alpha", 0.0, 1.0), _number(eps, "eps", 0.0),
        _number(initial_scale, "initial_scale", 0.0)))


def scale_by_rss(initial_accumulator_value=0.0, eps=1e-10):
    """g / (sqrt(sum of g^2) + eps) (Adagrad)."""
    return GradientTransformation(_core.scale_by_rss(
        _number(initial_accumulator_value, "initial_accumulator_value", 0.0),
        _number(eps, "eps", 0.0)))


def trace(momentum=0.9, dampening=0.0, nesterov=False,
          moment_requires_grad=False):
    """Momentum as torch.optim.SGD computes it (first buffer = first update)."""
    momentum = _number(momentum, "momentum", 0.0, 1.0)
    dampening = _number(dampening, "dampening", 0.0, 1.0)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("nesterov momentum needs `momentum` > 0 and "
                         f"`dampening` == 0, got {momentum}, {dampening}")
    return GradientTransformation(_core.trace(momentum, dampening,
                                              bool(nesterov),
                                              bool(moment_requires_grad)))


class _MaskedByTree(GradientTransformation):
    """A transformation built from a boolean mask over the parameter leaves.

    The mask is a pytree of bools with the parameters' structure, or a
    callable params -> such a tree; it is resolved at init() and fixed then.
    """

    __slots__ = ("_build", "_mask")

    def __init__(self, build, mask, config=None):
        super().__init__(None, config)
        self._build = build
        self._mask = mask

    def init(self, params):
        mask = self._mask(params) if callable(self._mask) else self._mask
        _, spec = _tree.flatten(params)
        try:
            flags = _tree.flatten_as(spec, mask)
        except (ValueError, TypeError) as exc:
            raise ValueError("`mask` must have the tree structure of the "
                             f"parameters: {exc}") from None
        for i, flag in enumerate(flags):
            if not isinstance(flag, bool):
                raise TypeError(f"`mask` leaves must be bools; leaf {i} is "
                                f"{type(flag).__name__}")
        self._core = self._build(list(flags))
        return super().init(params)

    def update(self, updates, state, params=None, inplace=True):
        if self._core is None:
            raise RuntimeError("call init(params) before update(): the mask "
                               "is resolved against the parameters there")
        return super().update(updates, state, params=params, inplace=inplace)


def add_decayed_weights(weight_decay=0.0, mask=None):
    """updates + weight_decay * params (on the masked leaves only)."""
    weight_decay = _number(weight_decay, "weight_decay", 0.0)
    if mask is None:
        return GradientTransformation(_core.add_decayed_weights(weight_decay, []))
    return _MaskedByTree(lambda m: _core.add_decayed_weights(weight_decay, m),
                         mask)


def masked(inner, mask=None):
    """Applies ``inner`` to the leaves where ``mask`` is True only."""
    if not isinstance(inner, GradientTransformation) or inner._core is None:
        raise TypeError("masked: `inner` must be a GradientTransformation "
                        "without a mask of its own")
    if mask is None:
        return inner
    return _MaskedByTree(lambda m: _core.masked(inner._core, m), mask)


def nan_to_num(nan=0.0, posinf=None, neginf=None):
    """Replaces NaN and infinities in the updates (torch.nan_to_num).

    Args:
        nan: the value of NaN entries.
        posinf, neginf: the values of infinite entries (None: the dtype's
            largest and smallest finite values).

    Returns:
        A GradientTransformation (stateless).
    """
    return GradientTransformation(_core.nan_to_num(
        float(nan), None if posinf is None else float(posinf),
        None if neginf is None else float(neginf)))


def clip_grad_norm(max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales updates to a global norm of at most ``max_norm``
    (``torch.nn.utils.clip_grad_norm_`` and TorchOpt semantics: the norm is
    computed without a graph, so gradients flow through the scaling by a
    constant only).

    Args:
        max_norm: the largest global norm of the updates.
        norm_type: the norm's order (``inf`` for the largest entry).
        error_if_nonfinite: raise RuntimeError when the norm is NaN or
            infinite.

    Returns:
        A GradientTransformation (stateless).
    """
    return GradientTransformation(_core.clip_grad_norm(
        _number(max_norm, "max_norm", 0.0), float(norm_type),
        bool(error_if_nonfinite)))
