"""metafuse.profile: every runtime instruction of a compiled function timed,
fused against unfused."""

import re
import warnings

import torch

from metafuse import _C
from metafuse import tuning as _tuning
from metafuse import tree as _tree
from metafuse.compile.compiled import CompiledCallable

_core = _C._compiler

__all__ = ["profile", "ProfileResult"]


class ProfileResult:
    """What profile() measured. ``summary``: the fused program's table (per
    program and op or fused kernel); ``unfused_summary``: the same program
    with fusion off; ``fused_us`` / ``unfused_us``: their total instruction
    times; ``chrome_trace``: JSON of the fused run for chrome://tracing or
    Perfetto; ``num_events``: instructions timed in the fused run;
    ``reports``: per compiled guard, what specialization and fusion did;
    ``choices``: the measured choices the process made or read
    (metafuse.tuning.report())."""

    def __init__(self, fused, unfused, reports, choices=()):
        self.summary = fused.summary
        self.unfused_summary = unfused.summary
        self.chrome_trace = fused.chrome_trace
        self.num_events = fused.num_events
        self.unfused_num_events = unfused.num_events
        self.fused_us = _total_us(fused.summary)
        self.unfused_us = _total_us(unfused.summary)
        self.reports = reports
        self.choices = list(choices)

    def __repr__(self):
        ratio = self.unfused_us / self.fused_us if self.fused_us else float("nan")
        return (f"fused {self.fused_us:.1f} us ({self.num_events} instructions) versus "
                f"unfused {self.unfused_us:.1f} us ({self.unfused_num_events} "
                f"instructions): {ratio:.2f}x\n"
                f"--- fused ---\n{self.summary}\n--- unfused ---\n{self.unfused_summary}\n"
                f"--- measured choices ---\n{_tuning.format_report(self.choices)}")


def _total_us(summary):
    match = re.search(r"total ([0-9.]+) us", summary)
    return float(match.group(1)) if match else 0.0


def profile(fn, *args, backward=True, trace_path=None, quiet=False):
    """Times every runtime instruction of a compiled function, fused versus
    unfused: once with fusion off (the generic program) and once with it on
    (specialized, fused kernels), after one untimed call of each so that
    neither holds compilation.

    Args:
        fn: a result of compile_inner_loop, compile or vmap.
        *args: the arguments of one call.
        backward: also time the compiled meta-backward (seeded with ones).
        trace_path: where to write the fused run's Chrome trace (optional).
        quiet: do not print the two tables.

    Returns:
        A ProfileResult (tables, totals, trace, per-guard fusion reports)."""
    if not isinstance(fn, CompiledCallable):
        raise TypeError("metafuse.profile: `fn` must be a function returned by "
                        "compile_inner_loop, compile or vmap")

    def run_once():
        out = fn(*args)
        if backward:
            leaves = [t for t in _tree.leaves(out)
                      if isinstance(t, torch.Tensor) and t.requires_grad]
            if leaves:
                torch.autograd.backward(leaves, [torch.ones_like(t) for t in leaves])

    def timed():
        handle = _core.Profile()
        handle.start()
        try:
            run_once()
        finally:
            handle.stop()
        return handle

    run_once()  # compiles for these arguments' guard if needed
    programs = fn.programs()
    enabled = [p.fusion() for p in programs]
    try:
        for p in programs:
            p.set_fusion(False)
        run_once()
        unfused = timed()
        for p in programs:
            p.set_fusion(True)
        run_once()
        fused = timed()
    finally:
        for p, on in zip(programs, enabled):
            p.set_fusion(on)
    result = ProfileResult(fused, unfused, [p.fusion_report() for p in programs],
                           _tuning.report())
    if fused.num_events == 0:
        warnings.warn("metafuse.profile: no compiled instruction ran (did the "
                      "call fall back to eager execution?)", stacklevel=2)
    if trace_path is not None:
        with open(trace_path, "w") as f:
            f.write(result.chrome_trace)
    if not quiet:
        print(repr(result))
    return result
