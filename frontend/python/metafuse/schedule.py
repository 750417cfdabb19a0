"""Learning-rate schedules: callables of the step count (0 at the first step).

Evaluated in C++; pass them as ``lr`` to any alias or to
``scale_by_schedule``.
"""

from metafuse import _C

_core = _C._optim


def _check_steps(transition_steps, transition_begin):
    if int(transition_steps) <= 0:
        raise ValueError(f"`transition_steps` must be > 0, got {transition_steps}")
    if int(transition_begin) < 0:
        raise ValueError(f"`transition_begin` must be >= 0, got {transition_begin}")


def polynomial_schedule(init_value, end_value, power, transition_steps,
                        transition_begin=0):
    """(init - end) * (1 - t / transition_steps) ** power + end, t clipped."""
    _check_steps(transition_steps, transition_begin)
    return _core.polynomial_schedule(float(init_value), float(end_value),
                                     float(power), int(transition_steps),
                                     int(transition_begin))


def linear_schedule(init_value, end_value, transition_steps, transition_begin=0):
    """init -> end linearly over ``transition_steps`` steps."""
    _check_steps(transition_steps, transition_begin)
    return _core.linear_schedule(float(init_value), float(end_value),
                                 int(transition_steps), int(transition_begin))


def exponential_decay(init_value, decay_rate, transition_steps,
                      transition_begin=0, staircase=False, end_value=None):
    """init * decay_rate ** (t / transition_steps), optionally bounded."""
    _check_steps(transition_steps, transition_begin)
    if float(decay_rate) <= 0:
        raise ValueError(f"`decay_rate` must be > 0, got {decay_rate}")
    return _core.exponential_decay(
        float(init_value), float(decay_rate), int(transition_steps),
        int(transition_begin), bool(staircase),
        0.0 if end_value is None else float(end_value), end_value is not None)
