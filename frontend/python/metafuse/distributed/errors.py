"""What the caller sees when a worker fails: a WorkerError that names the
worker and says what happened (no answer within the timeout, the process
is gone), or the worker's own exception with its traceback; with
collectives, a RankError on every rank that is left, naming the ranks that
failed.
"""

import threading

import torch

__all__ = ["WorkerError", "RankError", "describe_failure", "gather_futures"]


class WorkerError(RuntimeError):
    """A worker did not answer an RPC.

    Attributes:
        worker: the worker's name.
        rank: its rank.
        reason: ``"timeout"`` (no answer within the RPC timeout: it hangs or
            is overloaded) or ``"unreachable"`` (its process died or closed
            the connection).
    """

    def __init__(self, worker, rank, reason, detail):
        self.worker, self.rank, self.reason, self.detail = worker, rank, reason, detail
        what = {"timeout": "did not answer within the RPC timeout (it hangs, or is "
                           "overloaded)",
                "unreachable": "is unreachable: its process died or closed the "
                               "connection"}[reason]
        super().__init__(f"{worker} (rank {rank}) {what}: {detail}. The other workers "
                         "still serve requests: remove this one (TaskScheduler."
                         "remove_worker) and repeat the step, or restart the job")

    def __reduce__(self):
        return (type(self), (self.worker, self.rank, self.reason, self.detail))


class RankError(RuntimeError):
    """Ranks of a collective meta-step did not take part in it; raised on
    every rank that did, before anything of the step reached the caller's
    parameters.

    Attributes:
        ranks: the failed ranks (sorted ints).
        reason: ``"silent"`` (no heartbeat for ``seconds``: its process
            died, or its host is cut off), ``"timeout"`` (it is alive but
            did not finish its share within ``seconds``), ``"unreachable"``
            (the rendezvous store, on ``ranks``' host, cannot be reached
            from here) or ``"collective"`` (the all_reduce failed: ``ranks``
            stopped answering during it).
        step: the scheduler's meta-step number (from 0).
        seconds: how long this rank waited.
    """

    def __init__(self, ranks, reason, step, seconds, detail=""):
        self.ranks, self.reason, self.step, self.seconds = sorted(ranks), reason, step, seconds
        self.detail = detail
        names = ", ".join(str(r) for r in self.ranks)
        what = {"silent": f"sent no heartbeat for {seconds:.1f} s: its process died or its "
                          "host is cut off",
                "timeout": f"is alive but did not finish its share within {seconds:.1f} s "
                           "(the scheduler's timeout)",
                "unreachable": "cannot be reached: the rendezvous store on its host does "
                               "not answer (that host is down or cut off)",
                "collective": "stopped answering during the all_reduce"}[reason]
        super().__init__(
            f"rank{'s' if len(self.ranks) > 1 else ''} {names} {what} (meta-step {step}"
            f"{'; ' + detail if detail else ''}). Nothing of this step was applied: the "
            "parameters are as before it. Restart the failed rank and call "
            "scheduler.regroup() here, or restart the job")

    def __reduce__(self):
        return (type(self), (self.ranks, self.reason, self.step, self.seconds, self.detail))


_TIMEOUT_MARKS = ("timeout", "timed out")
_UNREACHABLE_MARKS = ("eof", "connection reset", "pipe closed", "connection refused",
                      "broken pipe", "shutting down", "unknown destination")


def describe_failure(worker, rank, exc):
    """The exception the caller should see for ``exc`` from an RPC to a worker.

    Args:
        worker: the worker's name.
        rank: its rank.
        exc: the exception the RPC future raised.

    Returns:
        A WorkerError for a timeout or a lost connection; ``exc`` itself for
        an exception raised inside the worker (its message already names
        the worker and holds the worker's traceback).
    """
    text = str(exc)
    if text.startswith("On WorkerInfo(") or "\nOn WorkerInfo(" in text:
        return exc
    lowered = text.lower()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if any(mark in lowered for mark in _TIMEOUT_MARKS):
        return WorkerError(worker, rank, "timeout", first)
    if any(mark in lowered for mark in _UNREACHABLE_MARKS):
        return WorkerError(worker, rank, "unreachable", first)
    return exc


def gather_futures(futures, targets):
    """One future for the list of results of ``futures``; it fails with the
    first failure in order, described by describe_failure.

    Args:
        futures: torch futures of RPCs.
        targets: (worker name, rank) of each future's destination.

    Returns:
        A torch.futures.Future of a list.
    """
    futures = list(futures)
    result = torch.futures.Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def finish():
        values = []
        for fut, (name, rank) in zip(futures, targets):
            try:
                values.append(fut.wait())
            except Exception as exc:  # noqa: BLE001 - re-raised, described
                result.set_exception(describe_failure(name, rank, exc))
                return
        result.set_result(values)

    def one_done(_):
        # collect_all fails as soon as one fails; waiting for all keeps the
        # order (the first failure in partition order is reported).
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            finish()

    if not futures:
        result.set_result([])
    for fut in futures:
        fut.add_done_callback(one_done)
    return result
