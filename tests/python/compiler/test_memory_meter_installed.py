"""With the memory meter installed (the benchmarks' and some tests'
allocation counter, runtime/base/memory_meter.cc), ATen's raw allocations
still work: the meter's DataPtrs keep their data pointer as context, which
Allocator::raw_allocate asserts, and raw memory taken before the meter came
returns through its raw deleter. Once, a capture of a convolution after a
memory measurement failed that assertion (and fell back to eager) or
aborted the process. In a fresh process, since the meter cannot be
uninstalled."""

import os
import subprocess
import sys

from package_under_test import PACKAGE_DIR

SCRIPT = r"""
import warnings
import torch
import metafuse as mf
from metafuse._C import _compiler as core
from metafuse.compiler import CompilationFallbackWarning

warnings.simplefilter("error", CompilationFallbackWarning)
torch.manual_seed(0)
x = torch.randn(8, 3, 16, 16)
# Raw memory taken before the meter (ATen's convolution takes some).
torch.nn.functional.conv2d(x, torch.randn(32, 3, 3, 3), padding=1).sum()
core.install_memory_meter()
model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.Flatten(),
                            torch.nn.Linear(32 * 16 * 16, 3))
y = torch.randint(0, 3, (8,))

def loss_fn(p, x, y):
    return torch.nn.functional.cross_entropy(mf.functional_call(model, p, x), y)

params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
fast = adapt(params, x, y)
compiled = torch.autograd.grad(loss_fn(fast, x, y), list(params.values()))
eager = adapt._eager(params, (x, y))
expected = torch.autograd.grad(loss_fn(eager, x, y), list(params.values()))
for a, b in zip(compiled, expected):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
stats = core.memory_stats()
assert stats["allocations"] > 0, stats
print("ok", stats["peak_bytes"] > 0)
"""


def test_a_capture_after_the_meter_is_installed_compiles():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": PACKAGE_DIR})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.strip().endswith("ok True"), done.stdout
