"""An artifact saved here and loaded in a fresh process (no tracing, no
compiling there) gives the same adapted parameters and meta-gradients, bit
for bit, in float64, whether it runs its own native code (signed, loaded
with the key) or, untrusted, kernels printed from its kernel IR; a job
artifact run by `metafuse run` gives the losses of the compiled step run
here, bit for bit."""

import io
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


KEY = "00112233445566778899aabbccddeeff"


def without_native_code(path):
    """A crafted copy of the artifact at ``path``: every ELF header in its
    program (the kernels' object code, the shared objects) broken, the
    manifest's checksums made to match; unsigned. Native code taken from it
    cannot load; kernels printed from the kernel IR run as before."""
    import hashlib
    import zipfile
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    # program.bin is itself a stored zip (LibTorch's archive), whose members
    # carry a CRC-32: each changed member's is set to match, in place.
    import zlib
    program = members["program.bin"]
    assert program.count(b"\x7fELF") > 0
    crafted_program = program.replace(b"\x7fELF", b"\x7fXLF")
    with zipfile.ZipFile(io.BytesIO(program)) as inner:
        for info in inner.infolist():
            data = inner.read(info)
            if b"\x7fELF" not in data:
                continue
            old = info.CRC.to_bytes(4, "little")
            new = zlib.crc32(data.replace(b"\x7fELF", b"\x7fXLF")).to_bytes(4, "little")
            crafted_program = crafted_program.replace(old, new)
    members["program.bin"] = crafted_program
    manifest = json.loads(members["manifest.json"])
    manifest["sha256"]["program.bin"] = hashlib.sha256(members["program.bin"]).hexdigest()
    members["manifest.json"] = json.dumps(manifest).encode()
    crafted = path.parent / "crafted.mfa"
    with zipfile.ZipFile(crafted, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return crafted


# signed: saved with a key, loaded with it: the artifact's host code runs.
# unsigned: a crafted artifact whose host code cannot load, loaded without
# trust: its kernels are printed from their kernel IR and compiled in the
# loading process, the same numbers; with trust=True its host code is tried
# and fails.
@pytest.mark.parametrize("backend", [pytest.param("llvm", marks=NO_LLVM), "cpp"])
@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_meta_gradients_are_bit_equal_in_a_fresh_process(tmp_path, backend, signed):
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
    aot.save(adapt, str(path), params, x, y, key=KEY if signed else None)
    if not signed:
        path = without_native_code(path)
    fast = adapt(params, x, y)
    query = torch.nn.functional.mse_loss(mf.functional_call(net, fast, x + 0.5), y)
    here = [fast[k].detach() for k in sorted(fast)]
    here += torch.autograd.grad(query, [params[k] for k in sorted(params)])
    torch.save({"net": net.state_dict(), "x": x, "y": y}, tmp_path / "inputs.pt")

    def child(trust):
        return textwrap.dedent(f"""
            import torch, metafuse as mf
            from metafuse import aot
            data = torch.load({str(tmp_path / 'inputs.pt')!r})
            net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                                      torch.nn.Linear(40, 40), torch.nn.ReLU(),
                                      torch.nn.Linear(40, 1)).double()
            net.load_state_dict(data["net"])
            params = {{k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}}
            x, y = data["x"], data["y"]
            loaded = aot.load({str(path)!r}, trust={trust})
            fast = loaded(params, x, y)
            query = torch.nn.functional.mse_loss(mf.functional_call(net, fast, x + 0.5), y)
            out = [fast[k].detach() for k in sorted(fast)]
            out += torch.autograd.grad(query, [params[k] for k in sorted(params)])
            torch.save(out, {str(tmp_path / 'there.pt')!r})
            stats = mf._C._compiler.fused_kernel_stats()
            stats["trusted"] = loaded.trusted
            torch.save(stats, {str(tmp_path / 'stats.pt')!r})
        """)
    # The child inherits this environment: OpenBLAS picks its GEMM kernels
    # from OPENBLAS_CORETYPE, and other kernels round differently.
    # An empty kernel cache: the artifact's host code, or what the child
    # compiles, is all there is. Signed, on the C++ back end, no compiler
    # either: the artifact's shared objects run.
    empty_cache = tmp_path / "empty-cache"
    env = dict(os.environ, PYTHONPATH=PACKAGE, XDG_CACHE_HOME=str(empty_cache),
               METAFUSE_HOST_BACKEND=backend)
    env.pop("METAFUSE_CACHE_DIR", None)
    env.pop("METAFUSE_ARTIFACT_KEY", None)
    if signed:
        env["METAFUSE_ARTIFACT_KEY"] = KEY
        if backend == "cpp":
            env["METAFUSE_CXX"] = str(tmp_path / "no-compiler-here")
    done = subprocess.run([sys.executable, "-c", child(False)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    there = torch.load(tmp_path / "there.pt")
    assert len(there) == len(here) == 12
    for a, b in zip(here, there):
        assert a.dtype == F64 and torch.equal(a, b)
    stats = torch.load(tmp_path / "stats.pt")
    assert stats["trusted"] is signed
    if signed:
        assert stats["compiled"] == 0, stats  # no code generator ran in the loading process
        assert stats["from_artifact"] > 0, stats
        if backend == "cpp":
            assert stats["libraries_from_artifact"] == 2, stats  # forward and backward
            assert stats["libraries_compiled"] == 0, stats
        return
    # Not trusted: none of the artifact's native code was loaded.
    assert stats["from_artifact"] == 0 and stats["libraries_from_artifact"] == 0, stats
    assert stats["compiled"] > 0, stats
    # Trusted, the same crafted file's host code is loaded, and cannot be.
    tried = subprocess.run([sys.executable, "-c", child(True)], capture_output=True, text=True,
                           timeout=300, env=env)
    assert tried.returncode != 0
    last = tried.stderr.strip().splitlines()[-1]
    assert ("not recognized as a valid object file" if backend == "llvm" else
            "cannot load fused kernel") in last, last


def test_an_untrusted_artifact_without_a_compiler_says_how_to_trust_it(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(4, 4, dtype=F64)

    @mf.compile
    def f(a):
        return torch.tanh(a * w + 1.0) * 2.0

    path = tmp_path / "f.mfa"
    aot.save(f, str(path), torch.randn(4, 4, dtype=F64))
    child = f"from metafuse import aot; aot.load({str(path)!r})"
    env = dict(os.environ, PYTHONPATH=PACKAGE, METAFUSE_HOST_BACKEND="cpp",
               METAFUSE_CXX=str(tmp_path / "no-compiler-here"),
               XDG_CACHE_HOME=str(tmp_path / "empty-cache"))
    env.pop("METAFUSE_CACHE_DIR", None)
    env.pop("METAFUSE_ARTIFACT_KEY", None)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "is not trusted (unsigned), so its kernels are compiled here" in last, last
    assert "sign it when saving (metafuse.aot.save(..., key=...))" in last, last
    assert "pass trust=True" in last, last


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
