"""The compiler's cost check of fusion: on a guard's first call, the
specialized program (shapes fixed, fused kernels, direct GEMMs and
reductions, planned buffers) is timed against the generic one it was made
from, each a call and its backward, by the tuning library's rule
(_cost_timing), and the generic one is kept only if it beats the
specialized one by the rule's margin. The choice is kept on the compiled
program (per guard) and reported in metafuse.tuning_report().

Specialization usually wins by far (the sinusoid's batched MAML program:
3x), but a fused kernel can lose to ATen's operator it replaced (a
conv net's fused kernels at 2 threads have been one such case), and this
check keeps any such program from running slower than unfused.

The timed calls run on detached copies of the inputs: nothing reaches the
caller's graph or gradients, and the random number generators are restored
afterwards, so the caller's first call computes what it would have without
the check. METAFUSE_FUSION_CHECK=0 turns it off (the specialized program is
then always used, as METAFUSE_DISABLE_FUSION=1 always uses the generic one).
"""

import itertools
import os

import torch

from metafuse import _cost_timing
from metafuse.compile import capture as _capture

__all__ = ["VARIABLE", "choose_fusion"]

VARIABLE = "METAFUSE_FUSION_CHECK"
_checks = itertools.count(1)


def _signature(leaves):
    return " ".join(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}" for t in leaves[:4]) + (
        f" +{len(leaves) - 4} more" if len(leaves) > 4 else "")


def _enabled():
    value = os.environ.get(VARIABLE, "1")
    if value not in ("0", "1"):
        raise ValueError(f"metafuse: {VARIABLE} must be 0 or 1, got {value!r}")
    return value == "1"


def choose_fusion(program, leaves):
    """Times ``program`` (a compiled C++ object with set_fusion) fused and
    unfused on ``leaves`` and keeps the faster.

    Returns:
        {"fusion": bool, "fused_s": float, "unfused_s": float}, or None when
        the check is off or cannot run here (tracing)."""
    # Fusion already off (METAFUSE_DISABLE_FUSION): nothing to choose.
    if not _enabled() or not program.fusion() or _capture.active():
        return None
    cuda = sorted({t.device.index or 0 for t in leaves if t.is_cuda})
    inputs = [t.detach().requires_grad_(t.requires_grad and t.is_floating_point())
              for t in leaves]
    wanted = [t for t in inputs if t.requires_grad]

    def seconds():
        return _cost_timing.seconds_of_call_and_backward(
            lambda: program(inputs), wanted,
            synchronize=bool(cuda))

    with torch.random.fork_rng(devices=cuda):
        try:
            program.set_fusion(True)
            fused_s = seconds()
            program.set_fusion(False)
            unfused_s = seconds()
        finally:
            program.set_fusion(True)
    # The specialized program is the default: the generic one must beat it
    # by the tuning library's margin (a near tie keeps the specialized one).
    fusion = not _cost_timing.beats_default(unfused_s, fused_s)
    program.set_fusion(fusion)
    _cost_timing.record_choice(
        "fusion", f"program {next(_checks)}: {_signature(leaves)}",
        "fused" if fusion else "unfused",
        f"fused {fused_s * 1e6:.1f} us, unfused {unfused_s * 1e6:.1f} us")
    return {"fusion": fusion, "fused_s": fused_s, "unfused_s": unfused_s}
