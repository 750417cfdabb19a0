"""Run by test_failures.py through the launcher (3 processes): rank 0 drives
a TaskScheduler while worker2 dies and worker1 hangs, and writes what it
saw to the JSON file named by argv[1]."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import dist_programs as programs  # noqa: E402
import metafuse.distributed as todist  # noqa: E402


def _step(scheduler, params, batch):
    for p in params.values():
        p.grad = None
    start = time.monotonic()
    try:
        (scheduler.task_losses(params, *batch).sum() / programs.TASKS).backward()
        return {"ok": True, "seconds": time.monotonic() - start,
                "error": programs.relative_error([p.grad for p in params.values()],
                                                 programs.reference_meta_gradient()[0])}
    except todist.WorkerError as exc:
        return {"ok": False, "seconds": time.monotonic() - start, "worker": exc.worker,
                "rank": exc.rank, "reason": exc.reason, "message": str(exc)}


def _wait_until_dead(pid, limit=30.0):
    """Block until the process has exited (gone or a zombie of the launcher):
    a fixed sleep raced the kill on a loaded machine and the step still ran."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    raise RuntimeError(f"worker2 (pid {pid}) did not exit within {limit} s of die_now")


@todist.auto_init_rpc()
def main(path):
    torch.set_num_threads(1)
    if todist.get_world_rank() != 0:
        return
    params, batch = programs.meta_params(), programs.task_batch()
    out = {}
    # Equal shares: balanced by measured cost, a loaded worker2 could be
    # given no task, and the step after its death would then succeed.
    scheduler = todist.TaskScheduler(programs.eager_task_loss, balance=False)
    out["before"] = _step(scheduler, params, batch)
    doomed = torch.distributed.rpc.rpc_sync("worker2", os.getpid)
    torch.distributed.rpc.rpc_async("worker2", programs.die_now)
    _wait_until_dead(doomed)
    out["killed"] = _step(scheduler, params, batch)
    scheduler.remove_worker(out["killed"].get("worker", "worker2"))
    out["workers_after_removal"] = scheduler.workers
    out["continued"] = _step(scheduler, params, batch)
    hanging = todist.TaskScheduler(programs.sleepy_task, workers=[0, 1], timeout=2.0)
    out["hung"] = _step(hanging, params, batch)
    with open(path, "w") as f:
        json.dump(out, f)
    os._exit(0)  # a peer is dead and one hangs: no graceful RPC shutdown


if __name__ == "__main__":
    main(sys.argv[1])
