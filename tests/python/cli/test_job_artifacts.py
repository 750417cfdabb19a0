"""metafuse.aot.save_job / load_job in one process: the job convention is
checked with the offending argument named, a program artifact is not a job,
and Job.run feeds each step's state to the next."""

import pytest
import torch

import metafuse as mf
from metafuse import aot

F64 = torch.float64


def quadratic_step(w, x):
    """One gradient step on ((w * x)^2).sum(): (new w, metrics)."""
    loss = ((w * x) ** 2).sum()
    g = mf.grad(loss, w)
    return w - 0.1 * g, {"loss": loss}


def data(batches=2):
    w = torch.tensor([0.5, -1.0, 2.0], dtype=F64)
    return aot.JobData(w, [(torch.full((3,), 1.0 + i, dtype=F64),) for i in range(batches)],
                       description="two fixed scalings")


def test_job_round_trip_runs_and_feeds_its_state(tmp_path):
    path = str(tmp_path / "q.mfa")
    manifest = aot.save_job(mf.compile(quadratic_step), path, data())
    assert manifest["job"]["metrics"] == ["loss"]
    assert manifest["job"]["data"]["count"] == 2
    job = aot.load_job(path)
    state, history = job.run(5)
    w = data().state
    for i in range(5):  # the same steps eagerly, batch i mod 2
        x = data().batches[i % 2][0]
        assert history[i]["loss"] == pytest.approx(float(((w * x) ** 2).sum()), rel=1e-12)
        w = w - 0.1 * 2 * x * x * w
    torch.testing.assert_close(state, w, rtol=1e-12, atol=0)
    assert history[-1]["loss"] < history[0]["loss"]
    with pytest.raises(ValueError, match="`steps` must be an integer"):
        job.run(-1)


def test_the_job_convention_is_checked(tmp_path):
    path = str(tmp_path / "bad.mfa")
    with pytest.raises(TypeError, match="`step` must be a function compiled"):
        aot.save_job(quadratic_step, path, data())
    with pytest.raises(TypeError, match="`data` must be a metafuse.aot.JobData"):
        aot.save_job(mf.compile(quadratic_step), path, (1, 2))
    mixed = data()
    mixed.batches.append((torch.ones(4, dtype=F64),))
    with pytest.raises(ValueError, match=r"batches\[2\] differs"):
        aot.save_job(mf.compile(quadratic_step), path, mixed)
    with pytest.raises(TypeError, match=r"non-empty list of data tuples"):
        aot.save_job(mf.compile(quadratic_step), path, aot.JobData(data().state, []))

    def no_metrics(w, x):
        return w - 0.1 * mf.grad(((w * x) ** 2).sum(), w)
    with pytest.raises(ValueError, match="pair \\(new_state, metrics\\)"):
        aot.save_job(mf.compile(no_metrics), path, data())

    def shrinking(w, x):
        loss = ((w * x) ** 2).sum()
        return (w - 0.1 * mf.grad(loss, w)).unsqueeze(0), loss
    with pytest.raises(ValueError, match="new state .* differs from `state`"):
        aot.save_job(mf.compile(shrinking), path, data())
    import os
    assert not os.path.exists(path)


def test_a_program_artifact_is_not_a_job(tmp_path):
    path = str(tmp_path / "p.mfa")
    w, (x,) = data().state, data().batches[0]
    aot.save(mf.compile(quadratic_step), path, w, x)
    with pytest.raises(aot.ArtifactError, match="not a job"):
        aot.load_job(path)
    assert aot.read(path).job is None


def test_save_refuses_a_program_that_does_not_survive_its_round_trip(tmp_path, monkeypatch):
    path = tmp_path / "r.mfa"
    w, (x,) = data().state, data().batches[0]
    step = mf.compile(quadratic_step)
    real_call = aot.LoadedProgram.__call__

    def perturbed(self, *args):
        new_w, metrics = real_call(self, *args)
        return new_w + 1e-12, metrics
    monkeypatch.setattr(aot.LoadedProgram, "__call__", perturbed)
    with pytest.raises(RuntimeError, match="output 0 differs"):
        aot.save(step, str(path), w, x)
    assert not path.exists()


def test_a_float32_scalar_times_a_python_float_survives_saving(tmp_path):
    @mf.compile
    def scaled(w, x):
        loss = ((w * x) ** 2).sum() * 0.25
        return w - 0.1 * mf.grad(loss, w), loss

    w, x = torch.tensor([0.5, -1.0]), torch.tensor([1.0, 2.0])
    # Program serialization keeps the wrapped-number flag of 0-dim constants
    # (float32 0-dim x Python float stays float32 after loading); without it
    # the round-trip check of save would refuse the artifact.
    aot.save(scaled, str(tmp_path / "s.mfa"), w, x)
    loaded = aot.load(str(tmp_path / "s.mfa"))
    for got, want in zip(loaded(w, x), scaled(w, x)):
        assert got.dtype == torch.float32
        assert torch.equal(got, want)
