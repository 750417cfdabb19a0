"""An artifact saved here and loaded in a fresh process (no tracing, no
compiling there) gives the same adapted parameters and meta-gradients, bit
for bit, in float64; a job artifact run by `metafuse run` gives the losses
of the compiled step run here, bit for bit."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import metafuse as mf
from metafuse import aot
from cli_helpers import PACKAGE, cli, write_job_script

F64 = torch.float64


NO_LLVM = pytest.mark.skipif(not mf._C.build_info()["llvm"],
                             reason="this build of metafuse has no LLVM (METAFUSE_WITH_LLVM=0)")


@pytest.mark.parametrize("backend", [pytest.param("llvm", marks=NO_LLVM), "cpp"])
def test_meta_gradients_are_bit_equal_in_a_fresh_process(tmp_path, backend):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                              torch.nn.Linear(40, 40), torch.nn.ReLU(),
                              torch.nn.Linear(40, 1)).double()
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.linspace(-5, 5, 10, dtype=F64).unsqueeze(1)
    y = torch.sin(x)

    @mf.compile
    def adapt(p, x, y):
        for _ in range(3):
            g = mf.grad(torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y), p)
            p = {k: p[k] - 0.01 * g[k] for k in p}
        return p

    path = tmp_path / "adapt.mfa"
    aot.save(adapt, str(path), params, x, y)
    fast = adapt(params, x, y)
    query = torch.nn.functional.mse_loss(mf.functional_call(net, fast, x + 0.5), y)
    here = [fast[k].detach() for k in sorted(fast)]
    here += torch.autograd.grad(query, [params[k] for k in sorted(params)])
    torch.save({"net": net.state_dict(), "x": x, "y": y}, tmp_path / "inputs.pt")

    child = textwrap.dedent(f"""
        import torch, metafuse as mf
        from metafuse import aot
        data = torch.load({str(tmp_path / 'inputs.pt')!r})
        net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                                  torch.nn.Linear(40, 40), torch.nn.ReLU(),
                                  torch.nn.Linear(40, 1)).double()
        net.load_state_dict(data["net"])
        params = {{k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}}
        x, y = data["x"], data["y"]
        fast = aot.load({str(path)!r})(params, x, y)
        query = torch.nn.functional.mse_loss(mf.functional_call(net, fast, x + 0.5), y)
        out = [fast[k].detach() for k in sorted(fast)]
        out += torch.autograd.grad(query, [params[k] for k in sorted(params)])
        torch.save(out, {str(tmp_path / 'there.pt')!r})
        torch.save(mf._C._compiler.fused_kernel_stats(), {str(tmp_path / 'stats.pt')!r})
    """)
    # The child inherits this environment: OpenBLAS picks its GEMM kernels
    # from OPENBLAS_CORETYPE, and other kernels round differently.
    # An empty kernel cache: the artifact's host code is all there is. On the
    # C++ back end no compiler either: the artifact's shared objects run.
    empty_cache = tmp_path / "empty-cache"
    env = dict(os.environ, PYTHONPATH=PACKAGE, XDG_CACHE_HOME=str(empty_cache),
               METAFUSE_HOST_BACKEND=backend)
    env.pop("METAFUSE_CACHE_DIR", None)
    if backend == "cpp":
        env["METAFUSE_CXX"] = str(tmp_path / "no-compiler-here")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    there = torch.load(tmp_path / "there.pt")
    assert len(there) == len(here) == 12
    for a, b in zip(here, there):
        assert a.dtype == F64 and torch.equal(a, b)
    stats = torch.load(tmp_path / "stats.pt")
    assert stats["compiled"] == 0, stats  # no code generator ran in the loading process
    assert stats["from_artifact"] > 0, stats
    if backend == "cpp":
        assert stats["libraries_from_artifact"] == 2, stats  # forward and backward
        assert stats["libraries_compiled"] == 0, stats


def test_job_losses_are_bit_equal_to_the_compiled_step(tmp_path):
    script = write_job_script(tmp_path)
    path = tmp_path / "job.mfa"
    namespace = {}
    exec(compile(open(script).read(), script, "exec"), namespace)
    data = namespace["example_args"]()
    step = mf.compile(namespace["meta_step"])
    aot.save_job(step, str(path), data)
    state, expected = data.state, []
    for _ in range(4):
        state, metrics = step(state, *data.batches[0])
        expected.append(float(metrics["loss"]))
    history = tmp_path / "history.json"
    done = cli("run", path, "--steps", 4, "--json", history)
    assert done.returncode == 0, done.stderr
    assert [m["loss"] for m in json.loads(history.read_text())["metrics"]] == expected
