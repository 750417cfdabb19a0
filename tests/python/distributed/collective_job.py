"""One rank of a collective-scheduler job, started by the tests (by
torchrun, or as a plain process with the variables torchrun sets), in its
own network namespace or on this host:

    python collective_job.py MODE OUT_DIR

MODE:
  equal   two meta-steps, per task then batched; every rank writes whether
          its meta-gradient is the single-process one, bit for bit.
  kill    rank 1 dies in meta-step 1; rank 0 writes what it saw.
  cut     rank 1 writes OUT_DIR/cut-me and waits; the test takes its link
          down; rank 0 writes what it saw.
  rejoin  as kill; once rank 0 wrote OUT_DIR/failure-seen the test restarts
          rank 1 (METAFUSE_TEST_REJOINED=1); rank 0 regroups with it, hands
          it the parameters, and both run the next meta-step.
Each rank writes OUT_DIR/rankR.json.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import collective_programs as cp  # noqa: E402
import dist_programs as programs  # noqa: E402
import metafuse.distributed as todist  # noqa: E402

SILENCE = 3.0


def same_bits(got, want):
    return all(torch.equal(torch.from_numpy(a), torch.from_numpy(b)) for a, b in zip(got, want))


def failed_step(scheduler, params, batch):
    """One meta-step expected to fail: what this rank saw."""
    before = cp.arrays(params.values())
    grads_before = cp.arrays(p.grad for p in params.values())
    start = time.monotonic()
    try:
        scheduler(params, *batch).backward()
        seen = {"raised": None}
    except todist.RankError as exc:
        seen = {"raised": str(exc), "ranks": exc.ranks, "reason": exc.reason}
    seen["seconds"] = time.monotonic() - start
    seen["params untouched"] = same_bits(cp.arrays(params.values()), before)
    seen["grads untouched"] = same_bits(cp.arrays(p.grad for p in params.values()),
                                        grads_before)
    return seen


def main(mode, out_dir):
    rejoined = os.environ.get("METAFUSE_TEST_REJOINED") == "1"
    info = todist.init_collectives(timeout=30)
    torch.set_num_threads(1)
    rank = info.rank
    params, batch = programs.meta_params(), programs.task_batch()
    seen = {"rank": rank, "backend": torch.distributed.get_backend()}
    if mode == "equal":
        for batched in (False, True):
            scheduler = todist.TaskScheduler(programs.compiled_task_loss, batched=batched,
                                             block=cp.BLOCK, shares=[4, 2])
            got = cp.meta_gradient(scheduler, params, batch)[0]
            seen[f"batched {batched}"] = same_bits(got, cp.single_process(batched)[0])
    else:
        scheduler = todist.TaskScheduler(programs.eager_task_loss, shares=[3, 3],
                                         silence=SILENCE)
        if not rejoined:
            cp.meta_gradient(scheduler, params, batch)  # meta-step 0
            if rank == 1 and mode in ("kill", "rejoin"):
                os._exit(9)
            if rank == 1 and mode == "cut":
                open(os.path.join(out_dir, "cut-me"), "w").close()
                time.sleep(60)  # cut off meanwhile; bounded
                os._exit(0)
            seen["failed"] = failed_step(scheduler, params, batch)
            with open(os.path.join(out_dir, "failure-seen"), "w") as f:
                json.dump(seen["failed"], f)
        if mode == "rejoin":
            start = time.monotonic()
            if not rejoined:
                scheduler.regroup()
            with torch.no_grad():  # what the others have moved to (a meta-optimizer's step)
                for p in params.values():
                    p.mul_(0.5 if rank == 0 else 0.0)
            scheduler.broadcast_parameters(params)
            seen["regroup seconds"] = time.monotonic() - start
            got = cp.meta_gradient(scheduler, params, batch)[0]
            with torch.no_grad():
                reference = programs.meta_params()
                for p in reference.values():
                    p.mul_(0.5)
            alone = todist.CollectiveScheduler(programs.eager_task_loss)
            seen["rejoined step exact"] = same_bits(
                got, cp.meta_gradient(alone, reference, batch)[0])
            seen["rejoined partition"] = scheduler.last_partition
    with open(os.path.join(out_dir, f"rank{rank}{'-rejoined' if rejoined else ''}.json"),
              "w") as f:
        json.dump(seen, f)
    os._exit(0)  # a peer may be gone: no graceful shutdown


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
