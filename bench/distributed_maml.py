"""Distributed MAML meta-step: metafuse's TaskScheduler on 1 and 2 workers,
per task and batched, over RPC and over torch.distributed collectives
(gloo), and TorchOpt's eager distributed idiom on 2, in one world of 2
processes (each its share of the cores: 1 thread here), variants
alternating meta-steps in one run (a gloo barrier before each step, so
that both ranks start it together).

Sinusoid regression, MLP 1-40-40-1, 5 inner SGD steps (lr 0.01), 10 shots,
meta-batch 400 tasks, float32:
  - per task, 1 worker : the compiled task (mf.compile, shipped as its AOT
                         artifact) on rank 0 alone (no RPC), once per task
  - per task, 2 workers: the same, tasks split between rank 0 and rank 1
  - batched, 1 / 2     : TaskScheduler(batched=True): each worker's share
                         as one metafuse.vmap program (its AOT artifact)
  - collective ...     : the same four over collectives (CollectiveScheduler:
                         both ranks run the step, one all_reduce; 1 rank: a
                         group of rank 0 alone, no collective)
  - TorchOpt idiom, 2  : rpc.RRef(net), parallelize (one RPC per worker),
                         MetaSGD on module_clone(net_rref.to_here()) per
                         task, eager, distributed autograd
It prints the median meta-step time of each (with the min and max, and
the load average before and after: the machine may be shared), the
ratios, each worker's own compute seconds in the 2-worker steps, the CPU
an idle worker burns (the RPC transport's polling), the CPU the machine
gives one and two spinning processes (on a shared machine the most 2
workers can gain, measured before and after the steps), each process's CPU
seconds per step (what two free cores would give: the 1-worker step's CPU
over the busier process's in the 2-worker step, a ratio other processes on
the machine barely move), and a projection to 8 and 64 workers from
measured per-task and per-message costs:

    T(W) = (n / W) * t_task + W * t_msg + n * t_reduce                  (RPC)
    T(W) = (n / W) * t_task + 2 (W - 1) a + 2 (W - 1) / W * S b
           + W * t_store + n * t_reduce                                (collectives)

(t_task: seconds per task on one worker; t_msg: one RPC round trip with the
parameters and one task's data; t_reduce: the per-task share of summing the
gradients: block sums on the workers, the caller's total of the blocks;
a, b: a ring all_reduce's per-hop latency and seconds per byte, from a
tiny and an S-byte gloo all_reduce on 2 ranks, S the step's buffer; t_store:
one store operation, the step barrier's per-rank cost at the store's
server.) Assumptions: every worker
has its own core (or GPU) running tasks at the measured t_task, the caller
issues its W messages one after another over TensorPipe as here (same
host; across hosts t_msg grows with the network), gloo's all_reduce is a
ring, and tasks are equal.

    /usr/bin/python3 bench/distributed_maml.py [--tasks 400] [--steps 7]
        [--transports uv] [--no-idiom] [--json FILE]

``--transports shm,uv`` gives torch's own transport choice (the shm
transport's reactor busy-polls: what made 2 workers no faster than 1).
"""

import argparse
import copy
import json
import os
import resource
import statistics
import sys
import time

import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F

import metafuse as mf  # noqa: E402
import metafuse.distributed as todist  # noqa: E402
from metafuse.distributed.scheduler import _assemble_blocks  # noqa: E402
from metafuse.distributed.task_runner import block_sums  # noqa: E402

# The example's model, tasks and compiled task (one definition of each).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from distributed_maml import (INNER_LR, INNER_STEPS, NET,  # noqa: E402
                              sample_tasks, task_loss)


def make_net():
    return copy.deepcopy(NET)


@todist.parallelize(partitioner=todist.batch_partitioner, reducer=todist.sum_reducer)
def torchopt_tasks(net_rref, xs, ys, xq, yq):
    """TorchOpt's eager idiom, one RPC per worker (its few-shot example
    sends one RPC per task; with more than 16 tasks per worker every RPC
    thread then blocks in to_here and the step times out, with torch's RRef
    as with metafuse's, so it cannot run 400 tasks)."""
    original = net_rref.to_here()
    total = 0
    for i in range(xs.shape[0]):
        net = mf.module_clone(original, by="reference", detach_buffers=True)
        inner = mf.MetaSGD(net, lr=INNER_LR)
        for _ in range(INNER_STEPS):
            inner.step(F.mse_loss(net(xs[i]), ys[i]))
        total = total + F.mse_loss(net(xq[i]), yq[i])
    return total


def _echo(*tensors):
    return len(tensors)


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _spin(seconds):
    """Spins this thread for ``seconds``; returns the CPU seconds it got."""
    start, cpu = time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < seconds:
        pass
    return time.thread_time() - cpu


def _cpu_available(rpc):
    """(CPU share one spinning process gets, the share two get together):
    their ratio is the most 2 workers can gain on this machine right now."""
    alone = _spin(1.0)
    theirs = rpc.rpc_async(1, _spin, args=(1.0,))
    mine = _spin(1.0)
    return alone, mine + theirs.wait()


def _load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def _block_reduce(grads):
    """What the workers and the caller do to the per-task gradients (the
    leaves flattened, [tasks, parameters]) in a 2-worker __call__: block
    sums per half, then the caller's total."""
    n = grads.shape[0]
    block = max(1, -(-n // 32))
    parts = [(None, 0, n // 2), (None, n // 2, n)]
    rows = torch.cat([block_sums(grads[a:b], a, block, n) for _, a, b in parts])
    return _assemble_blocks(rows, parts, block, n)


COLLECTIVE = ("collective per task", "collective batched")


def _collective_schedulers(rank):
    """The collective variants: 2 ranks on every rank, then (rank 0 only)
    1 rank, a group of rank 0 alone (the order every rank forms them in)."""
    schedulers = {f"{mode}, 2 workers": todist.CollectiveScheduler(task_loss, batched=batched)
                  for mode, batched in zip(COLLECTIVE, (False, True))}
    alone = dist.new_group([0])
    if rank == 0:
        schedulers.update({f"{mode}, 1 worker": todist.CollectiveScheduler(
            task_loss, batched=batched, group=alone) for mode, batched in zip(COLLECTIVE,
                                                                           (False, True))})
    return schedulers


def _collective_costs(params, tasks, block_rows):
    """(a, b, S, t_store) of the cost model, on 2 ranks (rank 1 mirrors)."""
    width = sum(p.numel() for p in params.values())
    size = block_rows * width + tasks + 4
    tiny, full = torch.zeros(1), torch.zeros(size)
    for buffer in (tiny, full):  # warm
        dist.all_reduce(buffer)
    t_tiny = statistics.median(_timed(lambda: dist.all_reduce(tiny)) for _ in range(30))
    t_full = statistics.median(_timed(lambda: dist.all_reduce(full)) for _ in range(30))
    return t_tiny / 2, max(0.0, t_full - t_tiny) / (4 * size), 4 * size


def _collective_partner(schedulers, names, steps, params, batch):
    """Rank 1: takes part in the collective 2-rank steps, waits otherwise."""
    for name in names:  # first calls
        dist.barrier()
        if name in schedulers:
            schedulers[name](params, *batch).backward()
    for _ in range(steps):
        for name in names:
            dist.barrier()
            if name in schedulers:
                schedulers[name](params, *batch).backward()
    block_rows = sum(schedulers["collective batched, 2 workers"].last_gradient_rows.values())
    dist.barrier()
    _collective_costs(params, batch[0].shape[0], block_rows)  # mirrors rank 0's all_reduces
    return None


def run_world(tasks, steps, idiom, group_port):
    """Rank 0 measures; rank 1 serves RPCs and takes part in the collective
    steps. Returns the measurements."""
    rank = todist.get_world_rank()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{group_port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=120))
    net = make_net()
    params = {k: v.detach().requires_grad_() for k, v in net.named_parameters()}
    batch = sample_tasks(tasks, torch.Generator().manual_seed(0))
    collective = _collective_schedulers(rank)
    names = [*(f"{m}, {w}" for m in ("per task", "batched") for w in ("1 worker", "2 workers")),
             *(f"{m}, {w}" for m in COLLECTIVE for w in ("1 worker", "2 workers"))]
    if idiom:
        names.append("TorchOpt idiom, 2 workers")
    if rank != 0:
        return _collective_partner(collective, names, steps, params, batch)
    rpc = torch.distributed.rpc
    available = [_cpu_available(rpc)]
    before = rpc.rpc_sync(1, _cpu_seconds)
    time.sleep(1.0)
    idle_cpu = rpc.rpc_sync(1, _cpu_seconds) - before
    schedulers = {
        "per task, 1 worker": todist.TaskScheduler(task_loss, workers=[0], backend="rpc"),
        "per task, 2 workers": todist.TaskScheduler(task_loss, workers=[0, 1], backend="rpc"),
        "batched, 1 worker": todist.TaskScheduler(task_loss, workers=[0], batched=True,
                                                  backend="rpc"),
        "batched, 2 workers": todist.TaskScheduler(task_loss, workers=[0, 1], batched=True,
                                                   backend="rpc"),
        **collective}
    first = {}
    for name in names:
        dist.barrier()
        if name in schedulers:
            first[name] = _timed(lambda s=schedulers[name]: s(params, *batch).backward())

    def idiom_step():
        net_rref = todist.rpc.RRef(net)
        with todist.autograd.context() as ctx:
            todist.autograd.backward(ctx, torchopt_tasks(net_rref, *batch) / tasks)

    variants = {name: (lambda s=s: s(params, *batch).backward())
                for name, s in schedulers.items()}
    if idiom:
        variants["TorchOpt idiom, 2 workers"] = idiom_step
    variants = {name: variants[name] for name in names}  # the order rank 1 follows
    times = {name: [] for name in variants}
    cpu = {name: [] for name in variants}  # (rank 0's, rank 1's) CPU seconds per step
    worker_seconds = {name: [] for name in schedulers if "2 workers" in name}
    load = [_load()]
    for _ in range(steps):
        for name, step in variants.items():
            before = (_cpu_seconds(), rpc.rpc_sync(1, _cpu_seconds))
            dist.barrier()  # both ranks start the step together
            times[name].append(_timed(step))
            cpu[name].append((_cpu_seconds() - before[0],
                              rpc.rpc_sync(1, _cpu_seconds) - before[1]))
            if name in worker_seconds:
                worker_seconds[name].append(dict(schedulers[name].last_seconds))
    load.append(_load())
    available.append(_cpu_available(rpc))
    medians = {name: statistics.median(t) for name, t in times.items()}
    # Cost-model inputs, measured here.
    leaves = [p.detach() for p in params.values()]
    task_slice = [b[:1].contiguous() for b in batch]
    rtt = statistics.median(_timed(lambda: rpc.rpc_sync(
        "worker1", _echo, args=(*leaves, *task_slice))) for _ in range(50))
    grads = torch.randn(tasks, sum(p.numel() for p in leaves))  # the leaves, flat
    reduce_s = statistics.median(_timed(lambda: _block_reduce(grads)) for _ in range(20))
    block_rows = sum(collective["collective batched, 2 workers"].last_gradient_rows.values())
    dist.barrier()
    hop, per_byte, buffer_bytes = _collective_costs(params, tasks, block_rows)
    store = todist.process_group.rendezvous_store()
    t_store = statistics.median(_timed(lambda: store.check(["metafuse/x"])) for _ in range(50))
    return {"tasks": tasks, "steps": steps, "first_call_s": first, "median_s": medians,
            "times_s": times, "load": load, "cpu_available": available,
            "cpu_s": {name: [statistics.median(c[r] for c in cpu[name]) for r in (0, 1)]
                      for name in variants}, "idle_worker_cpu_per_s": idle_cpu,
            "worker_seconds": {name: {w: statistics.median(s[w] for s in steps_seen)
                                      for w in steps_seen[0]}
                               for name, steps_seen in worker_seconds.items()},
            "t_task": medians["per task, 1 worker"] / tasks, "t_msg": rtt,
            "t_reduce": reduce_s / tasks, "t_hop": hop, "t_byte": per_byte,
            "buffer_bytes": buffer_bytes, "t_store": t_store,
            "partition": {name: s.last_partition for name, s in schedulers.items()
                          if "2 workers" in name},
            "artifact_bytes": {"per task": len(schedulers["per task, 2 workers"]._payload[2]),
                               **{f"batched, {k} tasks": len(v) for k, v in
                                  schedulers["batched, 2 workers"]._artifacts.items()}},
            "answer_bytes_per_task": 4 * (1 + sum(p.numel() for p in leaves)),
            "gradient_rows": {name: s.last_gradient_rows for name, s in schedulers.items()
                              if "2 workers" in name}}


def project(result, workers):
    n = result["tasks"]
    return (n / workers) * result["t_task"] + workers * result["t_msg"] + n * result["t_reduce"]


def project_collective(result, workers):
    n, w = result["tasks"], workers
    return ((n / w) * result["t_task"] + 2 * (w - 1) * result["t_hop"]
            + 2 * (w - 1) / w * result["buffer_bytes"] * result["t_byte"]
            + w * result["t_store"] + n * result["t_reduce"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--transports", default=None,
                        help="TensorPipe transports (METAFUSE_RPC_TRANSPORTS; default uv)")
    parser.add_argument("--no-idiom", action="store_true",
                        help="leave out TorchOpt's eager idiom (slow)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.transports:
        os.environ["METAFUSE_RPC_TRANSPORTS"] = args.transports  # inherited by the workers
    from metafuse.distributed.config import free_port
    result = todist.spawn(run_world, 2, args=(args.tasks, args.steps, not args.no_idiom,
                                              free_port()), timeout=900)[0]
    m = result["median_s"]
    print(f"MAML sinusoid, {result['tasks']} tasks, {result['steps']} meta-steps per variant "
          f"(alternating), OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS') or 'the share'}, "
          f"transports {os.environ.get('METAFUSE_RPC_TRANSPORTS', 'uv')}, load average "
          f"{result['load'][0]:.2f} -> {result['load'][1]:.2f}")
    print(f"  an idle worker's CPU: {result['idle_worker_cpu_per_s'] * 1e3:.1f} ms per second")
    print("  CPU this machine gave (before, after): one spinning process "
          + ", ".join(f"{a:.2f}" for a, _ in result["cpu_available"])
          + " of a core; two together " + ", ".join(f"{b:.2f}" for _, b in result["cpu_available"])
          + "; so 2 workers could gain at most "
          + ", ".join(f"{b / a:.2f}x" for a, b in result["cpu_available"]))
    if min(b / a for a, b in result["cpu_available"]) < 1.5:
        print("  NOTE: the machine did not give two processes two cores' worth of CPU; the "
              "wall-clock ratios below measure the machine, not the scheduler (see the "
              "CPU-seconds line)")
    for mode in ("per task", "batched", *COLLECTIVE):
        one, two = (result["times_s"][f"{mode}, {w}"] for w in ("1 worker", "2 workers"))
        paired = statistics.median(a / b for a, b in zip(one, two))
        print(f"  {mode}: 1 -> 2 workers, median of the per-round ratios (steps run "
              f"back to back, so a load change hits both): {paired:.2f}x")
    for mode in ("per task", "batched", *COLLECTIVE):
        base = m[f"{mode}, 1 worker"]
        for name, seconds in m.items():
            if name.startswith(mode) or (mode == "batched" and name.startswith("TorchOpt")):
                t = result["times_s"][name]
                print(f"  {name:27s} {seconds * 1e3:9.1f} ms (min {min(t) * 1e3:.1f}, max "
                      f"{max(t) * 1e3:.1f})   vs {mode}, 1 worker: {base / seconds:5.2f}x")
    cpu = result["cpu_s"]
    for mode in ("per task", "batched", *COLLECTIVE):
        one, two = cpu[f"{mode}, 1 worker"], cpu[f"{mode}, 2 workers"]
        print(f"  {mode}: CPU seconds per step (rank 0 + rank 1): 1 worker "
              f"{one[0] * 1e3:.1f} + {one[1] * 1e3:.1f} ms, 2 workers {two[0] * 1e3:.1f} + "
              f"{two[1] * 1e3:.1f} ms; on two free cores: {sum(one) / max(two):.2f}x")
    for mode, rpc_mode in zip(COLLECTIVE, ("per task", "batched")):
        print(f"  {mode} vs RPC {rpc_mode}, 2 workers: "
              f"{m[f'{rpc_mode}, 2 workers'] / m[f'{mode}, 2 workers']:.2f}x; 1 worker: "
              f"{m[f'{rpc_mode}, 1 worker'] / m[f'{mode}, 1 worker']:.2f}x")
    print(f"  batched vs per task, 2 workers: "
          f"{m['per task, 2 workers'] / m['batched, 2 workers']:.2f}x")
    for name, seconds in result["worker_seconds"].items():
        print(f"  {name}: each worker's own seconds (median) "
              + ", ".join(f"{w} {s * 1e3:.1f} ms" for w, s in seconds.items())
              + f"; partition {result['partition'][name]}")
    print("  shipped once per worker (bytes): " + ", ".join(
        f"{k} {v}" for k, v in result["artifact_bytes"].items())
          + f"; per step, per task: answer {result['answer_bytes_per_task']} bytes")
    print("  first call (artifacts made, shipped and loaded): "
          + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in result["first_call_s"].items()))
    if "TorchOpt idiom, 2 workers" in m:
        print(f"  batched scheduler vs TorchOpt idiom, 2 workers: "
              f"{m['TorchOpt idiom, 2 workers'] / m['batched, 2 workers']:.2f}x")
    print(f"cost model (per task): t_task {result['t_task'] * 1e3:.3f} ms, t_msg "
          f"{result['t_msg'] * 1e3:.3f} ms, t_reduce {result['t_reduce'] * 1e6:.2f} us per task")
    for w in (1, 2, 8, 64):
        t = project(result, w)
        print(f"  projected {w:3d} workers: {t * 1e3:8.1f} ms   speed-up {project(result, 1) / t:5.2f}x"
              + (f"   (measured {m['per task, 2 workers'] * 1e3:.1f} ms)" if w == 2 else ""))
    print(f"cost model (collectives): all_reduce hop {result['t_hop'] * 1e6:.1f} us, "
          f"{result['t_byte'] * 1e9:.3f} ns per byte, buffer {result['buffer_bytes']} bytes, "
          f"store operation {result['t_store'] * 1e6:.1f} us")
    for w in (1, 2, 8, 64):
        t = project_collective(result, w)
        print(f"  projected {w:3d} ranks:   {t * 1e3:8.1f} ms   speed-up "
              f"{project_collective(result, 1) / t:5.2f}x"
              + (f"   (measured {m['collective per task, 2 workers'] * 1e3:.1f} ms)"
                 if w == 2 else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
