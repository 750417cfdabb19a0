"""Distributed MAML on sinusoid regression: metafuse's TaskScheduler runs
the meta-batch's compiled tasks on every worker of the world.

    python3 -m metafuse.distributed.launch -n 2 examples/distributed_maml.py
    metafuse launch -n 2 examples/distributed_maml.py --batched
    torchrun --nproc_per_node=2 examples/distributed_maml.py   # where torchrun starts

Rank 0 owns the meta-parameters and the meta-optimizer; each meta-step it
sends every worker the parameters and its share of the tasks in one RPC,
gets back losses and per-task gradients, and `loss.backward()` reaches the
parameters. With --batched each worker runs its share as one batched
program (metafuse.vmap of the task). The other ranks only serve RPCs. Prints the meta-training loss
every few steps and how the tasks were split; it falls.
"""

import argparse
import math

import torch
import torch.nn.functional as F

import metafuse as mf
import metafuse.distributed as todist

HIDDEN, SHOTS, INNER_STEPS, INNER_LR = 40, 10, 5, 0.01
torch.manual_seed(0)  # the initial meta-parameters (rank 0 copies NET's)
NET = torch.nn.Sequential(torch.nn.Linear(1, HIDDEN), torch.nn.ReLU(),
                          torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                          torch.nn.Linear(HIDDEN, 1))


def query_loss(params, x, y):
    return F.mse_loss(mf.functional_call(NET, params, x), y)


@mf.compile
def task_loss(params, x_support, y_support, x_query, y_query):
    """One task: 5 SGD steps on the support set, then the query loss."""
    for _ in range(INNER_STEPS):
        grads = mf.grad(query_loss(params, x_support, y_support), params)
        params = {k: params[k] - INNER_LR * grads[k] for k in params}
    return query_loss(params, x_query, y_query)


def sample_tasks(count, generator):
    amplitude = 0.1 + 4.9 * torch.rand(count, 1, 1, generator=generator)
    phase = math.pi * torch.rand(count, 1, 1, generator=generator)
    x = 10 * torch.rand(count, 2 * SHOTS, 1, generator=generator) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:, :SHOTS], y[:, :SHOTS], x[:, SHOTS:], y[:, SHOTS:]


def worker_init():
    torch.set_num_threads(1)  # one process per core
    torch.manual_seed(todist.get_world_rank())


@todist.rank_zero_only
def train(steps, tasks, batched):
    params = {k: v.detach().clone().requires_grad_() for k, v in NET.named_parameters()}
    meta_opt = torch.optim.Adam(params.values(), lr=1e-3)
    scheduler = todist.TaskScheduler(task_loss, reduction="mean", batched=batched)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        meta_opt.zero_grad()
        loss = scheduler(params, *sample_tasks(tasks, generator))
        loss.backward()
        meta_opt.step()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:4d}  meta-loss {loss.item():.4f}  tasks per worker "
                  f"{[(name, b - a) for name, a, b in scheduler.last_partition]}", flush=True)


@todist.auto_init_rpc(worker_init)
def main():
    parser = argparse.ArgumentParser(description="distributed MAML on sinusoids")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=64, help="meta-batch size")
    parser.add_argument("--batched", action="store_true",
                        help="each worker's share as one batched program")
    args = parser.parse_args()
    train(args.steps, args.tasks, args.batched)


if __name__ == "__main__":
    main()
