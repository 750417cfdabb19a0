"""How metafuse's cost checks time a candidate (metafuse.vmap's strategies,
the fusion check): a call and its backward, gradients discarded and
nothing accumulated, after an untimed one that compiles; the fastest of up
to 3 timed ones, as many as fit in 50 ms, and never fewer than 2: one
timing of a long call is noisy too (the conv net's meta-batch at 2 threads
timed its parallel task loop at 179 ms once and 156-164 ms in other runs,
and one timing picked the slower strategy for the whole run)."""

import time

import torch

from metafuse import tree as _tree

__all__ = ["seconds_of_call_and_backward"]

_LEAST = 2
_MOST = 3
_BUDGET_S = 0.05
# A candidate this much slower than what it must beat has lost whatever
# the noise of one timing (10-15% on a long call, module docstring).
CLEARLY_SLOWER = 1.5


def seconds_of_call_and_backward(run, inputs, synchronize=False, give_up_above=None):
    """Seconds of ``run()`` and the gradient of its differentiable outputs
    (seeded with ones) with respect to ``inputs``.

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

    once()  # untimed: compiles
    timed = []
    while len(timed) < _LEAST or (len(timed) < _MOST and sum(timed) < _BUDGET_S):
        start = time.perf_counter()
        once()
        timed.append(time.perf_counter() - start)
        if give_up_above is not None and min(timed) > give_up_above:
            break
    return min(timed)
