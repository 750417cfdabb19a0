"""The driver's pass list, strict mode and the tuning report.

- metafuse._C._compiler.pipeline_stages() lists every stage the driver runs,
  in order, each with a file that exists (docs/pipeline.dot is drawn from it).
- With METAFUSE_STRICT=1 (the suites set it) a failure inside a compiler pass
  raises with the pass named; with it off, a fusion-stage failure falls back
  to the unfused program with a warning and the same numbers as eager.
  METAFUSE_FAIL_PASS injects the failure.
- The tuning library reports every measured choice: the fusion check's,
  through metafuse.tuning.report(), metafuse.profile and artifacts."""

import os
import pytest
import torch

import metafuse as mf
from metafuse import _C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
F64 = torch.float64


def step(w, x):
    return ((torch.tanh(x @ w) * 2.0 + 1.0) ** 2).mean()


def data():
    torch.manual_seed(0)
    return torch.randn(4, 3, dtype=F64, requires_grad=True), torch.randn(8, 4, dtype=F64)


def test_pipeline_stages_are_the_drivers_in_order():
    stages = _C._compiler.pipeline_stages()
    phases = [phase for phase, _, _ in stages]
    assert phases == sorted(phases, key=["prepare", "generic", "specialize",
                                          "fuse and lower"].index)
    names = [name for _, name, _ in stages]
    for expected in ("decompose", "autodiff", "specialize shapes", "split grouped convolutions",
                     "fuse elementwise", "merge fusion groups", "fuse pool epilogues",
                     "plan buffers", "lower to program"):
        assert expected in names
    assert names.index("fuse elementwise") < names.index("fuse horizontally")
    for _, name, path in stages:
        if path.startswith(("compiler/", "runtime/")):
            assert os.path.isfile(os.path.join(ROOT, path)), (name, path)


@pytest.mark.parametrize("stage", ["fuse elementwise", "plan buffers", "decompose", "autodiff"])
def test_strict_mode_raises_naming_the_pass(monkeypatch, stage):
    monkeypatch.setenv("METAFUSE_STRICT", "1")
    monkeypatch.setenv("METAFUSE_FAIL_PASS", stage)
    w, x = data()
    with pytest.raises(RuntimeError, match=f"pass '{stage}'"):
        mf.compile(step)(w, x)


def test_without_strict_a_fusion_failure_falls_back_with_the_same_numbers(monkeypatch):
    monkeypatch.setenv("METAFUSE_STRICT", "0")
    monkeypatch.setenv("METAFUSE_FAIL_PASS", "fuse elementwise")
    w, x = data()
    compiled = mf.compile(step)
    loss = compiled(w, x)  # warns (TORCH_WARN) that fusion was abandoned
    (g,) = torch.autograd.grad(loss, w)
    expected = step(w, x)
    (g_eager,) = torch.autograd.grad(expected, w)
    assert torch.allclose(loss, expected, rtol=1e-12, atol=0)
    assert torch.allclose(g, g_eager, rtol=1e-12, atol=0)
    [program] = compiled.programs()
    reports = program.fusion_report()
    assert any("fuse elementwise" in r.get("fallback", "") for r in reports.values()
               if isinstance(r, dict))


def test_an_unsupported_op_stays_a_warning_under_strict(monkeypatch):
    monkeypatch.setenv("METAFUSE_STRICT", "1")
    monkeypatch.delenv("METAFUSE_FAIL_PASS", raising=False)

    def fn(w, x):
        return torch.special.i0(x @ w).sum()  # outside the primitive set

    w, x = data()
    with pytest.warns(mf.CompilationFallbackWarning):
        out = mf.compile(fn)(w, x)
    assert torch.equal(out, fn(w, x))


def test_the_fusion_check_is_in_the_tuning_report_and_profile(monkeypatch):
    monkeypatch.delenv("METAFUSE_FUSION_CHECK", raising=False)
    monkeypatch.delenv("METAFUSE_FAIL_PASS", raising=False)
    _C._tuning.clear_for_testing()
    w, x = data()
    compiled = mf.compile(step)
    compiled(w, x)
    [record] = compiled.fusion_checks()
    fusion = [r for r in mf.tuning.report() if r["table"] == "fusion"]
    assert len(fusion) == 1
    assert fusion[0]["choice"] == ("fused" if record["fusion"] else "unfused")
    assert fusion[0]["source"] == "measured" and "unfused" in fusion[0]["note"]
    assert mf.tuning.rule()["margin"] == pytest.approx(1.1)
    result = mf.profile(compiled, w, x, quiet=True)
    assert any(r["table"] == "fusion" for r in result.choices)
    text = repr(result)
    assert "--- measured choices ---\n" in text
    assert "fusion: program" in text.split("--- measured choices ---")[1]


def test_the_rule_decides_as_documented():
    assert _C._tuning.beats_default(1.0, 1.2)
    assert not _C._tuning.beats_default(1.0, 1.05)
    calls = []
    seconds = _C._tuning.seconds_of(lambda: calls.append(1))
    assert seconds >= 0 and len(calls) == 4  # one untimed, three timed (well under 50 ms)
    with pytest.raises(ValueError, match="source must be"):
        _C._tuning.record("t", "k", "c", "guessed", "")
