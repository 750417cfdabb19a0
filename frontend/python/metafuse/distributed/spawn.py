"""A local world from one Python call (the quick start):

    results = metafuse.distributed.spawn(main, nprocs=2, args=(steps,))

runs ``main(*args)`` in ``nprocs`` fresh processes (multiprocessing's
"spawn" start method) with the world variables set and RPC started
(auto_init_rpc), and returns every rank's result. A failure in any process
stops the others and raises SpawnError with that process's traceback; a
process that dies without a word, or a world that exceeds ``timeout``,
raises too. Processes are always reaped before spawn returns.
"""

import multiprocessing
import os
import queue as _queue
import time
import traceback

from metafuse.distributed.config import free_port, thread_share, worker_environment

__all__ = ["spawn", "SpawnError"]


class SpawnError(RuntimeError):
    """A spawned process failed, died or ran out of time.

    Attributes:
        rank: the failing rank (None on timeout).
    """

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


def _entry(fn, args, rank, nprocs, port, init_rpc, threads, results):
    os.environ.update({k: v for k, v in worker_environment(
        rank, nprocs, master_addr="127.0.0.1", master_port=port, base={}).items()
        if k != "OMP_NUM_THREADS"})  # too late here: spawn set it before the start
    try:
        import torch
        if threads is not None:
            torch.set_num_threads(threads)
        from metafuse.distributed import world
        world.reread_world_info()  # fn's module may have imported it before the variables
        if init_rpc:
            world.init_rpc_from_environment()
        value = fn(*args)
        results.put((rank, "ok", value))
        if init_rpc:
            world.barrier()  # every rank reported before RPC goes away
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, "error", traceback.format_exc()))
        results.close()
        results.join_thread()  # the report is written before the process ends
        os._exit(1)


def _reap(processes, wait=5.0):
    deadline = time.monotonic() + wait
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join()


def _thread_environment(threads, nprocs):
    """OMP_NUM_THREADS for the children, which must hold before they start:
    OpenMP reads it once, for every thread (torch.set_num_threads in the
    child sets only its main thread's, not its RPC threads')."""
    if threads == "auto":
        return os.environ.get("OMP_NUM_THREADS") or str(thread_share(nprocs))
    return None if threads is None else str(threads)


def spawn(fn, nprocs, args=(), *, timeout=300.0, init_rpc=True, threads="auto"):
    """Runs ``fn(*args)`` in ``nprocs`` local processes, one world.

    Args:
        fn: a function importable by name (module level; in a script, under
            ``if __name__ == "__main__":``).
        nprocs: the world size.
        args: its arguments (picklable).
        timeout: seconds the whole world may take.
        init_rpc: start RPC in each process before ``fn`` (auto_init_rpc).
        threads: intra-op threads per process: "auto" (OMP_NUM_THREADS if
            set, else the cores divided among the processes), an int, or
            None (torch's default).

    Returns:
        A list of each rank's return value.

    Raises:
        ValueError: ``nprocs`` is not a positive int.
        SpawnError: a process raised (its traceback is in the message),
            died, or the world exceeded ``timeout``.
    """
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"spawn: `nprocs` must be a positive int, got {nprocs!r}")
    if not (threads in (None, "auto") or (isinstance(threads, int) and threads >= 1)):
        raise ValueError(f"spawn: `threads` must be 'auto', None or a positive int, got "
                         f"{threads!r}")
    omp_threads = _thread_environment(threads, nprocs)
    threads = None if omp_threads is None else int(omp_threads)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    processes = [context.Process(target=_entry, name=f"metafuse-worker{rank}",
                                 args=(fn, tuple(args), rank, nprocs, port, init_rpc,
                                       threads, results))
                 for rank in range(nprocs)]
    values = {}
    saved = os.environ.get("OMP_NUM_THREADS")
    try:
        if omp_threads is not None:  # inherited by the children at start
            os.environ["OMP_NUM_THREADS"] = omp_threads
        try:
            for p in processes:
                p.start()
        finally:
            if saved is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        deadline = time.monotonic() + timeout
        while len(values) < nprocs:
            try:
                rank, status, value = results.get(timeout=0.1)
            except _queue.Empty:
                for rank, p in enumerate(processes):
                    if rank not in values and not p.is_alive() and p.exitcode != 0:
                        raise SpawnError(f"spawn: rank {rank} died with exit code "
                                         f"{p.exitcode} before returning", rank) from None
                if time.monotonic() > deadline:
                    missing = [r for r in range(nprocs) if r not in values]
                    raise SpawnError(f"spawn: ranks {missing} did not finish within "
                                     f"{timeout:g} s") from None
                continue
            if status == "error":
                raise SpawnError(f"spawn: rank {rank} raised:\n{value}", rank)
            values[rank] = value
        _reap(processes, wait=timeout)
        return [values[r] for r in range(nprocs)]
    finally:
        _reap(processes, wait=0.0 if len(values) < nprocs else 5.0)
