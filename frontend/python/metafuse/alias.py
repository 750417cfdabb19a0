"""The optimizers users name, as GradientTransformations (TorchOpt/Optax
style). ``fused=True`` runs each update as one multi-tensor kernel from
kernels/ (same numbers, exact closed-form backward) instead of a chain of
transforms. Update rules follow torch.optim; names, argument order and
defaults follow TorchOpt 0.7.3 (``import metafuse as torchopt`` runs TorchOpt
programs unchanged). Where TorchOpt's defaults differ from torch.optim's they
are TorchOpt's: adamax (lr=1e-3, eps=1e-6), adadelta (lr=1e-3), radam
(eps=1e-6); pass them explicitly to reproduce torch.optim. ``sgd``'s
positional order is (lr, momentum, dampening, weight_decay, nesterov).
``use_accelerated_op=True`` (TorchOpt's name) is ``fused=True``.

``lr`` may be a number, a tensor (a learned, differentiable rate) or a
schedule (see metafuse.schedule).
"""

import numbers

import torch

from metafuse import _C
from metafuse import schedule, transform
from metafuse import tree
from metafuse.base import GradientTransformation, chain
from metafuse.transform import _betas, _MaskedByTree, _number

_core = _C._optim

__all__ = ["sgd", "adam", "adamw", "adamax", "adadelta", "adagrad", "radam",
           "rmsprop"]


def _lr(lr):
    if isinstance(lr, torch.Tensor) or callable(lr):
        return schedule.unwrap(lr)
    if not isinstance(lr, numbers.Real):
        raise TypeError(f"`lr` must be a number, a tensor or a schedule, got "
                        f"{type(lr).__name__}")
    if lr < 0:
        raise ValueError(f"`lr` must be >= 0 (use maximize=True to ascend), "
                         f"got {lr}")
    return float(lr)


def sgd(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
        moment_requires_grad=False, maximize=False, fused=False):
    """Stochastic gradient descent (torch.optim.SGD).

    Args:
        lr: the learning rate: a number, a scalar tensor (differentiable, for
            a learned rate), a schedule ``step -> rate``, or a pytree of
            tensors with the parameters' structure: one learned rate per
            parameter leaf (Meta-SGD).
        momentum, dampening, weight_decay, nesterov: as torch.optim.SGD.
        moment_requires_grad: create the state's moment tensors requiring
            grad (TorchOpt's option).
        maximize: ascend the objective instead of descending it.
        fused: run the update as one fused operator (``torch.ops.metafuse``)
            instead of a chain of tensor operations; the same numbers.

    Returns:
        A GradientTransformation: ``init(params)`` makes the state,
        ``update(grads, state, params=..., inplace=...)`` returns the updates
        to add to the parameters (:func:`metafuse.apply_updates`) and the new
        state; differentiable with ``inplace=False``.
    """
    config = ("sgd", dict(locals()))
    if _is_rate_tree(lr):
        return _sgd_per_leaf(lr, momentum, dampening, nesterov, weight_decay,
                             moment_requires_grad, maximize, fused, config)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("nesterov momentum needs `momentum` > 0 and "
                         f"`dampening` == 0, got {momentum}, {dampening}")
    return GradientTransformation(_core.sgd(
        _lr(lr), _number(momentum, "momentum", 0.0, 1.0),
        _number(dampening, "dampening", 0.0, 1.0),
        _number(weight_decay, "weight_decay", 0.0), bool(nesterov),
        bool(maximize), bool(moment_requires_grad), bool(fused)), config)


def _is_rate_tree(lr):
    if isinstance(lr, torch.Tensor) or callable(lr) or isinstance(lr, numbers.Real):
        return False
    leaves = tree.leaves(lr)
    return bool(leaves) and all(isinstance(t, torch.Tensor) for t in leaves)


def _sgd_per_leaf(lr, momentum, dampening, nesterov, weight_decay,
                  moment_requires_grad, maximize, fused, config):
    """SGD whose step is scaled leaf by leaf by the tensors of ``lr``."""
    if fused:
        raise ValueError("sgd(fused=True) needs a number `lr`, not per-leaf rates")
    parts = [transform.flip_sign()] if maximize else []
    if weight_decay:
        parts.append(transform.add_decayed_weights(weight_decay))
    if momentum:
        parts.append(transform.trace(momentum, dampening, nesterov,
                                     moment_requires_grad=moment_requires_grad))
    parts.append(GradientTransformation(
        _core.scale_per_leaf([-t for t in tree.leaves(lr)])))
    out = chain(*parts)
    out._config = config
    return out


def _accelerated(fused, use_accelerated_op, lr):
    """use_accelerated_op (TorchOpt) maps to the fused operator where it
    applies (a number lr); otherwise the unfused chain gives the same
    numbers."""
    if not use_accelerated_op:
        return bool(fused)
    return bool(fused) or isinstance(lr, numbers.Real)


def adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
         eps_root=0.0, moment_requires_grad=False, maximize=False,
         use_accelerated_op=False, amsgrad=False, fused=False):
    """Adam (torch.optim.Adam).

    Args:
        lr: the learning rate: a number, a scalar tensor or a schedule.
        betas, eps, weight_decay, amsgrad: as torch.optim.Adam.
        eps_root: added inside the square root of the second moment (Optax's
            name). Meta-gradients are exact where the second moment is
            zero with or without it.
        moment_requires_grad, maximize, fused: as for :func:`sgd`.
        use_accelerated_op: TorchOpt's name for ``fused``.

    Returns:
        A GradientTransformation, as :func:`sgd` describes.
    """
    fused = _accelerated(fused, use_accelerated_op and not amsgrad, lr)
    config = ("adam", dict(locals()))
    b1, b2 = _betas(betas)
    return GradientTransformation(_core.adam(
        _lr(lr), b1, b2, _number(eps, "eps", 0.0),
        _number(eps_root, "eps_root", 0.0),
        _number(weight_decay, "weight_decay", 0.0), bool(maximize),
        bool(moment_requires_grad), bool(amsgrad), bool(fused)), config)


def adamw(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *,
          eps_root=0.0, mask=None, moment_requires_grad=False, maximize=False,
          use_accelerated_op=False, amsgrad=False, fused=False):
    """AdamW (torch.optim.AdamW): Adam with decoupled weight decay.

    Args:
        lr, betas, eps, eps_root, amsgrad: as :func:`adam`.
        weight_decay: the decoupled decay rate.
        mask: decay only the leaves where this bool pytree (or a callable of
            the params returning one) is True; None: every leaf.
        moment_requires_grad, maximize, fused: as for :func:`sgd`.
        use_accelerated_op: TorchOpt's name for ``fused``.

    Returns:
        A GradientTransformation, as :func:`sgd` describes.
    """
    fused = _accelerated(fused, use_accelerated_op and not amsgrad, lr)
    config = ("adamw", dict(locals()))
    b1, b2 = _betas(betas)
    args = (_lr(lr), b1, b2, _number(eps, "eps", 0.0),
            _number(eps_root, "eps_root", 0.0),
            _number(weight_decay, "weight_decay", 0.0), bool(maximize),
            bool(moment_requires_grad), bool(amsgrad))
    if mask is None:
        return GradientTransformation(_core.adamw(*args, [], bool(fused)), config)
    return _MaskedByTree(lambda m: _core.adamw(*args, m, bool(fused)), mask,
                         config)


def adamax(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, *,
           moment_requires_grad=False, maximize=False, fused=False):
    """Adamax (torch.optim.Adamax's rule; TorchOpt's defaults lr=1e-3,
    eps=1e-6).

    Args:
        lr, betas, eps, weight_decay: as torch.optim.Adamax.
        moment_requires_grad, maximize, fused: as for :func:`sgd`.

    Returns:
        A GradientTransformation, as :func:`sgd` describes.
    """
    config = ("adamax", dict(locals()))
    b1, b2 = _betas(betas)
    return GradientTransformation(_core.adamax(
        _lr(lr), b1, b2, _number(eps, "eps", 0.0),
        _number(weight_decay, "weight_decay", 0.0), bool(maximize),
        bool(moment_requires_grad), bool(fused)), config)


def radam(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, *,
          moment_requires_grad=False, maximize=False, fused=False):
    """RAdam (torch.optim.RAdam's rule; TorchOpt's default eps=1e-6).

    Args:
        lr, betas, eps, weight_decay: as torch.optim.RAdam.
        moment_requires_grad, maximize, fused: as for :func:`sgd`.

    Returns:
        A GradientTransformation, as :func:`sgd` describes.
    """
    config = ("radam", dict(locals()))
    b1, b2 = _betas(betas)
    return GradientTransformation(_core.radam(
        _lr(lr), b1, b2, _number(eps, "eps", 0.0),
        _number(weight_decay, "weight_decay", 0.0), bool(maximize),
        bool(moment_requires_grad), bool(fused)), config)


def adadelta(lr=1e-3, rho=0.9, eps=1e-6, weight_decay=0.0, *,
             moment_requires_grad=False, maximize=False, fused=False):
    """Adadelta (torch.optim.Adadelta's rule; TorchOpt's default lr=1e-3,
    torch.optim's is 1.0).

    Args:
        lr, rho, eps, weight_decay: as torch.optim.Adadelta.
        moment_requires_grad, maximize, fused: as for :func:`sgd`.

    Returns:
        A GradientTransformation, as :func:`sgd` describes.
    """
    config = ("adadelta", dict(locals()))
    return GradientTransformation(_core.adadelta(
        _lr(lr), _number(rho, "rho", 0.0, 1.0), _number(eps, "eps", 0.0),
        _number(weight_decay, "weight_decay", 0.0), bool(maximize),
        bool(moment_requires_grad), bool(fused)), config)


def adagrad(lr=1e-2, lr_decay=0.0, weight_decay=0.0,
            initial_accumulator_value=0.0, eps=1e-10, *, maximize=False,
            fused=False):
    """Adagrad (torch.optim.Adagrad).

    Args:
        lr, lr_decay, weight_decay, initial_accumulator_value, eps: as
            torch.optim.Adagrad.
        maximize, fused: as for :func:`sgd`.

    Returns:
        A GradientTransformation, as :func:`sgd` describes.
    """
    config = ("adagrad", dict(locals()))
    return GradientTransformation(_core.adagrad(
        _lr(lr), _number(lr_decay, "lr_decay", 0.0),
        _number(weight_decay, "weight_decay", 0.0),
        _number(initial_accumulator_value, "initial_accumulator_value", 0.0),
        _number(eps, "eps", 0.0), bool(maximize), bool(fused)), config)


def rmsprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
            centered=False, *, initial_scale=0.0, nesterov=False,
            maximize=False, moment_requires_grad=False, fused=False):
    """RMSProp (torch.optim.RMSprop), plain or centered, with momentum.

    Args:
        lr, alpha, eps, weight_decay, momentum, centered: as
            torch.optim.RMSprop.
        initial_scale: the square average's initial value (TorchOpt).
        nesterov: Nesterov momentum (TorchOpt).
        moment_requires_grad, maximize, fused: as for :func:`sgd`.

    Returns:
        A GradientTransformation, as :func:`sgd` describes.
    """
    config = ("rmsprop", dict(locals()))
    return GradientTransformation(_core.rmsprop(
        _lr(lr), _number(alpha, "alpha", 0.0, 1.0), _number(eps, "eps", 0.0),
        _number(weight_decay, "weight_decay", 0.0),
        _number(momentum, "momentum", 0.0, 1.0), bool(centered),
        bool(maximize), bool(moment_requires_grad), bool(fused),
        _number(initial_scale, "initial_scale", 0.0), bool(nesterov)), config)
