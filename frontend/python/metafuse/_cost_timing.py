"""How metafuse's Python cost checks (metafuse.vmap's strategies, the
fusion check) time a candidate: a call and its backward, gradients
discarded and nothing accumulated, by the tuning library's one timing rule
(runtime/tuning/timing_rule.h, through metafuse._C._tuning): one untimed
run that compiles, then the fastest of 2 or 3 timed ones (a 3rd while they
total under 50 ms). One timing of a long call is noisy too: the conv net's
meta-batch at 2 threads timed its parallel task loop at 179 ms once and
156-164 ms in other runs, and one timing picked the slower strategy for the
whole run."""

import math

import torch

from metafuse import _C
from metafuse import tree as _tree

__all__ = ["seconds_of_call_and_backward", "beats_default", "record_choice", "CLEARLY_SLOWER"]

# A candidate this much slower than what it must beat has lost whatever
# the noise of one timing (10-15% on a long call, module docstring).
CLEARLY_SLOWER = 1.5


def seconds_of_call_and_backward(run, inputs, synchronize=False, give_up_above=None):
    """Seconds of ``run()`` and the gradient of its differentiable outputs
    (seeded with ones) with respect to ``inputs``, by the timing rule.

    Args:
        run: the call; returns a pytree of tensors.
        inputs: the tensors to differentiate with respect to (may be empty:
            forward only).
        synchronize: wait for CUDA work before reading the clock.
        give_up_above: seconds past which the candidate has clearly lost (a
            rival's time, times the margin it must beat, times
            CLEARLY_SLOWER): a timed run slower than that ends the timing,
            so a loser costs one timed run instead of two or three."""
    def once():
        outputs = [t for t in _tree.leaves(run())
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if outputs and inputs:
            torch.autograd.grad(outputs, inputs, [torch.ones_like(t) for t in outputs],
                                allow_unused=True)
        if synchronize:
            torch.cuda.synchronize()

    return _C._tuning.seconds_of(once, math.inf if give_up_above is None else give_up_above)


def beats_default(rival_seconds, default_seconds):
    """Whether a rival replaces the default: faster by the rule's margin."""
    return _C._tuning.beats_default(rival_seconds, default_seconds)


def record_choice(table, key, choice, note=""):
    """Adds a measured choice kept on the object it belongs to (a compiled
    program's fusion, a metafuse.vmap function's strategy) to the tuning
    report (metafuse.tuning_report())."""
    _C._tuning.record(table, key, choice, "measured", note)
