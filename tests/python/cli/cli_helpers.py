"""Shared by the CLI tests: running ``python3 -m metafuse`` in a fresh
process, and a small sinusoid-MAML job script (float64)."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
from package_under_test import PACKAGE_DIR as PACKAGE  # noqa: E402

# A whole meta-training step: 2 tasks, 3 inner SGD steps written with
# metafuse.grad, the query loss, the meta-gradient, the outer SGD update.
JOB_SCRIPT = '''
import math
import torch
import metafuse as mf
from metafuse.aot import JobData

torch.manual_seed(0)
NET = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 1)).double()


def task_loss(p, x, y):
    return torch.nn.functional.mse_loss(mf.functional_call(NET, p, x), y)


def meta_step(params, tasks):
    losses = []
    for xs, ys, xq, yq in tasks:
        fast = params
        for _ in range(3):
            g = mf.grad(task_loss(fast, xs, ys), fast)
            fast = {k: fast[k] - 0.01 * g[k] for k in fast}
        losses.append(task_loss(fast, xq, yq))
    loss = torch.stack(losses).mean()
    meta = mf.grad(loss, params)
    return {k: params[k] - 0.05 * meta[k] for k in params}, {"loss": loss}


def tasks(seed, count=2):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        a = 0.1 + 4.9 * torch.rand((), generator=g, dtype=torch.float64)
        ph = math.pi * torch.rand((), generator=g, dtype=torch.float64)
        x = 10 * torch.rand(10, 1, generator=g, dtype=torch.float64) - 5
        y = a * torch.sin(x + ph)
        out.append((x[:5], y[:5], x[5:], y[5:]))
    return out


def example_args():
    params = {k: v.detach().clone() for k, v in NET.named_parameters()}
    return JobData(params, [(tasks(1),)], description="one fixed meta-batch")


def program_args():
    params = {k: v.detach().clone() for k, v in NET.named_parameters()}
    return (params, tasks(1))


if __name__ == "__main__":
    raise SystemExit("not run by metafuse compile")
'''


def write_job_script(directory):
    path = os.path.join(str(directory), "job_script.py")
    with open(path, "w") as f:
        f.write(JOB_SCRIPT)
    return path


def cli(*args, env=None, timeout=300):
    """Runs ``python3 -m metafuse ARGS`` in a fresh process."""
    environment = dict(os.environ, PYTHONPATH=PACKAGE, **(env or {}))
    return subprocess.run([sys.executable, "-m", "metafuse", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=environment)
