"""A whole MAML meta-training step on sinusoid regression, compiled as one
program and saved as a job artifact (docs/cli.md):

    metafuse compile examples/sinusoid_maml_job.py:meta_step -o maml_job.mfa
    metafuse run maml_job.mfa --steps 200

One step: for each task of the meta-batch, 5 inner SGD steps on its support
set written with metafuse.grad (second order: the meta-gradient goes through
them), the mean query loss, its meta-gradient with metafuse.grad, and the
outer SGD update. MLP 1-40-40-1. Under the job convention
``meta_step(state, tasks) -> (new_state, metrics)`` the state is the
meta-parameters. ``example_args`` returns the data the job runs on:
META_BATCHES fixed meta-batches drawn once from a seeded task sampler and
stored in the artifact, cycled in order.

Tasks are a list of (x_support, y_support, x_query, y_query) tuples rather
than one stacked tensor indexed inside the step: indexing (aten::select) is
outside the compiler's primitive set and would make the step run eagerly.
"""

import math

import torch

import metafuse as mf
from metafuse.aot import JobData

HIDDEN, INNER_STEPS, INNER_LR, OUTER_LR = 40, 5, 0.01, 0.05
META_BATCH, SHOTS, META_BATCHES, DTYPE = 4, 10, 8, torch.float32

torch.manual_seed(0)
NET = torch.nn.Sequential(torch.nn.Linear(1, HIDDEN), torch.nn.ReLU(),
                          torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                          torch.nn.Linear(HIDDEN, 1)).to(DTYPE)


def task_loss(params, x, y):
    return torch.nn.functional.mse_loss(mf.functional_call(NET, params, x), y)


def meta_step(params, tasks):
    """One meta-training step: (new meta-parameters, {"loss": query loss})."""
    losses = []
    for x_support, y_support, x_query, y_query in tasks:
        fast = params
        for _ in range(INNER_STEPS):
            grads = mf.grad(task_loss(fast, x_support, y_support), fast)
            fast = {k: fast[k] - INNER_LR * grads[k] for k in fast}
        losses.append(task_loss(fast, x_query, y_query))
    loss = torch.stack(losses).mean()
    meta_grads = mf.grad(loss, params)
    return {k: params[k] - OUTER_LR * meta_grads[k] for k in params}, {"loss": loss}


def sample_tasks(generator):
    """One meta-batch of sinusoid tasks (amplitude in [0.1, 5], phase in
    [0, pi], inputs in [-5, 5])."""
    tasks = []
    for _ in range(META_BATCH):
        amplitude = 0.1 + 4.9 * torch.rand((), generator=generator, dtype=DTYPE)
        phase = math.pi * torch.rand((), generator=generator, dtype=DTYPE)
        x = 10 * torch.rand(2 * SHOTS, 1, generator=generator, dtype=DTYPE) - 5
        y = amplitude * torch.sin(x + phase)
        tasks.append((x[:SHOTS], y[:SHOTS], x[SHOTS:], y[SHOTS:]))
    return tasks


def example_args():
    """The job's data: initial meta-parameters and META_BATCHES meta-batches."""
    generator = torch.Generator().manual_seed(1)
    params = {k: v.detach().clone() for k, v in NET.named_parameters()}
    batches = [(sample_tasks(generator),) for _ in range(META_BATCHES)]
    return JobData(params, batches, description=(
        f"sinusoid MAML, {META_BATCHES} meta-batches of {META_BATCH} tasks x {SHOTS} "
        "shots, drawn once with seed 1 and cycled"))


if __name__ == "__main__":
    step = mf.compile(meta_step)
    data = example_args()
    state = data.state
    for i in range(20):
        state, metrics = step(state, *data.batches[i % META_BATCHES])
        print(f"step {i}: loss {float(metrics['loss']):.4f}")
