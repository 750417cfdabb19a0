"""Programs the collective-scheduler tests run in every rank of a world
(spawn without RPC, or processes of their own in network namespaces).
Module-level, so that spawned processes import them by name. Tensors come
back as numpy arrays (pickled by value: the bits are kept)."""

import os
import sys

import torch

import dist_programs as programs
import metafuse.distributed as todist

PARTITIONS = {"3 + 3": [3, 3], "6 + 0": [6, 0], "0 + 6": [0, 6], "4 + 2": [4, 2],
              "1 + 5": [1, 5]}
BLOCK = 4


def arrays(tensors):
    return [t.detach().numpy().copy() for t in tensors]


def meta_gradient(scheduler, params, batch, per_task=False):
    """(the meta-gradient, the loss) of one step of ``scheduler``."""
    for p in params.values():
        p.grad = None
    if per_task:
        loss = scheduler.task_losses(params, *batch).sum() / programs.TASKS
    else:
        loss = scheduler(params, *batch)
    loss.backward()
    return arrays(p.grad for p in params.values()), float(loss.detach())


def single_process(batched, per_task=False):
    """The single-process meta-gradient: a CollectiveScheduler without
    torch.distributed runs the whole meta-batch alone."""
    scheduler = todist.CollectiveScheduler(programs.compiled_task_loss, batched=batched,
                                           block=BLOCK)
    return meta_gradient(scheduler, programs.meta_params(), programs.task_batch(), per_task)


def partitions_world():
    """Every partition, per task and batched, block sums and per-task
    gradients; the default (balanced) split over three steps."""
    todist.init_collectives(timeout=60)
    torch.set_num_threads(1)
    params, batch = programs.meta_params(), programs.task_batch()
    out = {"kind": type(todist.TaskScheduler(programs.compiled_task_loss)).__name__}
    for batched in (False, True):
        for name, shares in PARTITIONS.items():
            scheduler = todist.TaskScheduler(programs.compiled_task_loss, batched=batched,
                                             block=BLOCK, shares=shares)
            out[(batched, name, "sum")] = meta_gradient(scheduler, params, batch)
            out[(batched, name, "rows")] = scheduler.last_gradient_rows
            out[(batched, name, "per task")] = meta_gradient(scheduler, params, batch, True)
        balanced = todist.TaskScheduler(programs.compiled_task_loss, batched=batched,
                                        block=BLOCK)
        out[(batched, "balanced")] = [meta_gradient(balanced, params, batch) for _ in range(3)]
        out[(batched, "balanced partitions")] = balanced.last_partition
    return out


def on_device(device, batched):
    """(the meta-gradient, the loss) with the parameters and the tasks on
    ``device`` (shares [4, 2] in a world of 2; alone, the whole batch)."""
    params = {k: v.detach().to(device).requires_grad_() for k, v in
              programs.meta_params().items()}
    batch = [b.to(device) for b in programs.task_batch()]
    shares = [4, 2] if todist.get_world_size() == 2 else None
    scheduler = todist.CollectiveScheduler(programs.compiled_task_loss, batched=batched,
                                           block=BLOCK, shares=shares)
    for p in params.values():
        p.grad = None
    loss = scheduler(params, *batch)
    loss.backward()
    return [p.grad.cpu().numpy().copy() for p in params.values()], float(loss.detach())


def nccl_world():
    """Each rank on its own GPU (init_collectives picks NCCL there)."""
    todist.init_collectives(timeout=60)
    backend = torch.distributed.get_backend()
    device = todist.worker_device()
    return backend, str(device), {b: on_device(device, b) for b in (False, True)}


if __name__ == "__main__":  # pragma: no cover - a manual check
    print(single_process(batched="--batched" in sys.argv)[1])
