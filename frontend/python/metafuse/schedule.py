"""Learning-rate schedules: callables of the step count (0 at the first step).

Evaluated in C++; pass them as ``lr`` to any alias or to
``scale_by_schedule``. Called from Python they return a 0-dim tensor (as
TorchOpt's schedules do); inside an optimizer the C++ value is used directly.
Signatures and defaults are TorchOpt 0.7.3's.
"""

import numbers

import torch

from metafuse import _C

_core = _C._optim

__all__ = ["exponential_decay", "polynomial_schedule", "linear_schedule"]


class Schedule:
    """A schedule evaluated in C++: ``schedule(count) -> tensor``."""

    __slots__ = ("_fn", "_description")

    def __init__(self, fn, description):
        self._fn = fn
        self._description = description

    def __call__(self, count):
        if isinstance(count, torch.Tensor):
            count = int(count.reshape(-1)[0]) if count.numel() else 0
        return torch.tensor(self._fn(int(count)), dtype=torch.get_default_dtype())

    def __repr__(self):
        return self._description


def unwrap(schedule):
    """The C++ callable behind a Schedule (other callables unchanged)."""
    return schedule._fn if isinstance(schedule, Schedule) else schedule


def _check_number(value, name):
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.Tensor)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}")
    return float(value)


def _check_steps(transition_steps, transition_begin):
    if int(transition_steps) <= 0:
        raise ValueError(f"`transition_steps` must be > 0, got {transition_steps}")
    if int(transition_begin) < 0:
        raise ValueError(f"`transition_begin` must be >= 0, got {transition_begin}")


def polynomial_schedule(init_value, end_value, power, transition_steps,
                        transition_begin=0):
    """(init - end) * (1 - t / transition_steps) ** power + end, t clipped."""
    _check_steps(transition_steps, transition_begin)
    args = (_check_number(init_value, "init_value"),
            _check_number(end_value, "end_value"), _check_number(power, "power"))
    return Schedule(_core.polynomial_schedule(*args, int(transition_steps),
                                              int(transition_begin)),
                    f"polynomial_schedule{args + (transition_steps, transition_begin)}")


def linear_schedule(init_value, end_value, transition_steps, transition_begin=0):
    """init -> end linearly over ``transition_steps`` steps."""
    _check_steps(transition_steps, transition_begin)
    args = (_check_number(init_value, "init_value"),
            _check_number(end_value, "end_value"))
    return Schedule(_core.linear_schedule(*args, int(transition_steps),
                                          int(transition_begin)),
                    f"linear_schedule{args + (transition_steps, transition_begin)}")


def exponential_decay(init_value, decay_rate, transition_begin=0,
                      transition_steps=1, staircase=False, end_value=None):
    """init * decay_rate ** ((t - transition_begin) / transition_steps) after
    ``transition_begin`` (init before), floored exponent with ``staircase``,
    bounded by ``end_value`` (TorchOpt's order of arguments)."""
    _check_steps(transition_steps, transition_begin)
    init_value = _check_number(init_value, "init_value")
    if _check_number(decay_rate, "decay_rate") <= 0:
        raise ValueError(f"`decay_rate` must be > 0, got {decay_rate}")
    fn = _core.exponential_decay(
        init_value, float(decay_rate), int(transition_steps),
        int(transition_begin), bool(staircase),
        0.0 if end_value is None else float(end_value), end_value is not None)
    return Schedule(fn, f"exponential_decay({init_value}, {decay_rate}, "
                        f"{transition_begin}, {transition_steps}, {staircase}, "
                        f"{end_value})")
