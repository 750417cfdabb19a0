"""Peak tensor memory of one call, counted exactly by metafuse's wrapper
around c10's CPU allocator (every allocation: eager ops, autograd, compiled
instructions, fused-kernel outputs). Shared by the benchmarks that report
memory; install the meter first thing in a fresh process."""

import resource

from metafuse._C import _compiler as core


def install():
    core.install_memory_meter()


def peak_during(fn):
    """Runs fn(); returns the peak of live tensor bytes above the level at
    its start (MiB) and the process's peak RSS so far (MiB)."""
    core.reset_peak_memory()
    start = core.memory_stats()["live_bytes"]
    fn()
    stats = core.memory_stats()
    return {"peak_tensor_mib": (stats["peak_bytes"] - start) / 2**20,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
