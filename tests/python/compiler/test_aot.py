"""metafuse.aot: an artifact saved from compile_inner_loop / compile results
loads without tracing or compiling and gives the same adapted parameters and
meta-gradients, bit for bit; damaged, truncated and foreign artifacts are
refused with the failed check named."""

import json
import os
import zipfile

import pytest
import torch

import metafuse as mf
from metafuse import aot


def make_task(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.ReLU(),
                              torch.nn.Linear(40, 40), torch.nn.ReLU(),
                              torch.nn.Linear(40, 1))
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.rand(10, 1) * 10 - 5
    return net, params, x, torch.sin(x)


def query_meta_gradients(net, params, adapted, x, y):
    loss = torch.nn.functional.mse_loss(mf.functional_call(net, adapted, x), y)
    return torch.autograd.grad(loss, list(params.values()))


@pytest.mark.parametrize("return_losses", [False, True])
def test_inner_loop_artifact_matches_the_compiled_function(tmp_path, return_losses):
    net, params, x, y = make_task()
    scale = torch.tensor(1.5, requires_grad=True)  # closed over: saved in the artifact

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x) * scale, y)

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=5,
                                  return_losses=return_losses)
    path = str(tmp_path / "maml.mfa")
    manifest = aot.save(adapt, path, params, x, y)
    assert manifest["inputs"]["closed_over"] == 1
    job = aot.load(path)
    got, want = job(params, x, y), adapt(params, x, y)
    if return_losses:
        assert torch.equal(got[1], want[1])
        got, want = got[0], want[0]
    for k in want:
        assert torch.equal(got[k], want[k]), k
    for g, w in zip(query_meta_gradients(net, params, got, x, y),
                    query_meta_gradients(net, params, want, x, y)):
        assert torch.equal(g, w)


def test_compiled_function_artifact(tmp_path):
    net, params, x, y = make_task()

    @mf.compile
    def adapt(p, x, y):
        g = mf.grad(torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y), p)
        return {k: p[k] - 0.1 * g[k] for k in p}

    path = str(tmp_path / "fn.mfa")
    aot.save(adapt, path, params, x, y)
    got, want = aot.load(path)(params, x, y), adapt(params, x, y)
    for k in want:
        assert torch.equal(got[k], want[k])


def test_wrong_arguments_are_refused(tmp_path):
    net, params, x, y = make_task()
    loss_fn = lambda p, x, y: torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=1)
    path = str(tmp_path / "a.mfa")
    aot.save(adapt, path, params, x, y)
    job = aot.load(path)
    with pytest.raises(ValueError, match="structure differs"):
        job({"0.weight": params["0.weight"]}, x, y)
    with pytest.raises(RuntimeError, match="specialized for"):
        job(params, x[:5], y[:5])


def saved(tmp_path):
    net, params, x, y = make_task()
    loss_fn = lambda p, x, y: torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
    path = str(tmp_path / "a.mfa")
    aot.save(mf.compile_inner_loop(loss_fn, mf.sgd(0.01), steps=1), path, params, x, y)
    return path


def rewrite(path, change):
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    change(members)
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


def test_truncated_artifact_is_refused(tmp_path):
    path = saved(tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])
    with pytest.raises(aot.ArtifactError, match="truncated"):
        aot.load(path)


def test_corrupted_program_is_refused_by_its_checksum(tmp_path):
    path = saved(tmp_path)

    def flip(members):
        program = bytearray(members["program.bin"])
        program[len(program) // 2] ^= 0xFF
        members["program.bin"] = bytes(program)
    rewrite(path, flip)
    with pytest.raises(aot.ArtifactError, match="checksum of program.bin"):
        aot.load(path)


def test_foreign_versions_are_refused(tmp_path):
    path = saved(tmp_path)

    def other_torch(members):
        manifest = json.loads(members["manifest.json"])
        manifest["torch"] = "0.0.1"
        members["manifest.json"] = json.dumps(manifest).encode()
    rewrite(path, other_torch)
    with pytest.raises(aot.ArtifactError, match="LibTorch 0.0.1"):
        aot.load(path)

    def other_format(members):
        manifest = json.loads(members["manifest.json"])
        manifest["format"] = "metafuse-aot 99"
        members["manifest.json"] = json.dumps(manifest).encode()
    rewrite(path, other_format)
    with pytest.raises(aot.ArtifactError, match="format"):
        aot.load(path)


def test_not_an_artifact(tmp_path):
    path = tmp_path / "x.mfa"
    path.write_bytes(b"hello")
    with pytest.raises(aot.ArtifactError, match="not a metafuse artifact"):
        aot.load(str(path))
    with pytest.raises(TypeError, match="compile_inner_loop, compile or vmap"):
        aot.save(lambda: 0, str(tmp_path / "y.mfa"))
