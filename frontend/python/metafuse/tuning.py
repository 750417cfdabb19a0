"""metafuse.tuning: the measured choices this process made or read, from
the tuning library (runtime/tuning): which GEMM kernel ran each small
product and which algorithm each convolution shape, whether a grouped
convolution was split, whether each compiled program runs fused, and which
strategy metafuse.vmap took. Every choice is timed by one rule (one
untimed run, then the fastest of 2-3 timed ones, alternating between
candidates; a rival replaces the default only when 1.1x faster) and kept:
per process, and for the machine-wide ones (GEMM, convolution, grouped
convolution split) in a file per machine in the kernel cache directory, so
later processes reuse them instead of measuring again.

``metafuse.profile`` and ``metafuse inspect`` show this report."""

from metafuse import _C

__all__ = ["report", "format_report", "rule"]


def report():
    """The measured choices this process made or read (GEMM kernels,
    convolution algorithms, vmap strategies, fusion checks...).

    Returns:
        A list of dicts with the keys "table", "key", "choice", "source" and
        "note", in the order first made. ``source``: "measured" (timed in
        this process), "machine file" (timed by an earlier process on this
        machine; ``note`` is the file) or "setting" (an environment variable
        chose; ``note`` names it).
    """
    return _C._tuning.report()


def rule():
    """The timing rule's constants.

    Returns:
        A dict: ``least_repeats`` and ``most_repeats`` (timed runs per
        candidate after an untimed warm-up; the last one only while its
        runs total under ``repeat_budget_seconds``), ``give_up_factor`` (a
        candidate this many times slower than the fastest warm-up is not
        repeated) and ``margin`` (how much faster than the default a rival
        must be to replace it).
    """
    return _C._tuning.rule()


def format_report(records, limit=20):
    """The report as text, one line per choice.

    Args:
        records: what :func:`report` returned.
        limit: at most this many lines of choices (then a count of the rest).

    Returns:
        A string ("no measured choice" for an empty report).
    """
    if not records:
        return "no measured choice"
    lines = [f"{r['table']}: {r['key']} -> {r['choice']} ({r['source']}"
             + (f": {r['note']}" if r["note"] else "") + ")" for r in records[:limit]]
    if len(records) > limit:
        lines.append(f"... {len(records) - limit} more")
    return "\n".join(lines)
