"""Profiling a compiled inner loop, fused against unfused.

metafuse.profile runs the compiled function twice, once with fusion off (the
generic program) and once with it on (shape-specialized, fused kernels), and
times every runtime instruction of each, the meta-backward included.

    python docs/howto/profiling.py
"""

import json
import os
import tempfile

import torch
import torch.nn.functional as F

import metafuse as mf

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 40), torch.nn.ReLU(),
                          torch.nn.Linear(40, 1))


def loss_fn(params, x, y):
    return F.mse_loss(mf.functional_call(net, params, x), y)


adapt = mf.compile_inner_loop(loss_fn, mf.adam(0.01, eps_root=1e-8), steps=5)
params = dict(net.named_parameters())
x, y = torch.randn(10, 1), torch.randn(10, 1)

trace = os.path.join(tempfile.mkdtemp(), "trace.json")
result = mf.profile(adapt, params, x, y, backward=True, trace_path=trace, quiet=True)
print(f"fused {result.fused_us:.0f} us against unfused {result.unfused_us:.0f} us "
      f"({result.unfused_us / result.fused_us:.1f}x), {result.num_events} instructions timed")
print(result.summary.splitlines()[0])        # the fused table's header; print(result) shows all
with open(trace) as f:
    print(f"Chrome trace: {len(json.load(f)['traceEvents'])} events in {trace}")
