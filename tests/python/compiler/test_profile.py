"""metafuse.profile: every runtime instruction of the compiled forward and
meta-backward is timed, fused and unfused side by side; table and Chrome
trace."""

import json

import pytest
import torch

import metafuse as mf


def test_profile_times_every_instruction(tmp_path):
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(8, 4, dtype=torch.float64)

    def loss_fn(p, x):
        return torch.tanh(x @ p).pow(2).mean()

    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=2)
    adapt(w, x)  # compile outside the profile
    trace = tmp_path / "trace.json"
    result = mf.profile(adapt, w, x, trace_path=str(trace), quiet=True)
    program = adapt.programs()[0]
    # Unfused: the generic programs; fused: the specialized ones, fewer.
    assert result.unfused_num_events == (program.forward_instructions +
                                         program.backward_instructions)
    report = program.fusion_report()
    assert result.num_events == (report["forward"]["instructions"] +
                                 report["backward"]["instructions"])
    assert result.num_events < result.unfused_num_events
    # Fused: products are direct GEMM calls; unfused: ATen's mm.
    assert "gemm_" in result.summary and "backward" in result.summary
    assert "aten::mm" in result.unfused_summary
    assert "fused_" in result.summary and "fused_" not in result.unfused_summary
    assert result.fused_us > 0 and result.unfused_us > 0
    assert "versus" in repr(result)
    assert program.fusion()  # left as it was
    events = json.loads(trace.read_text())["traceEvents"]
    assert len(events) == result.num_events
    assert {e["cat"] for e in events} == {"forward", "backward"}
    assert all(e["dur"] >= 0 for e in events)


def test_profile_rejects_plain_functions():
    with pytest.raises(TypeError, match="compile_inner_loop, compile or vmap"):
        mf.profile(lambda x: x, torch.ones(1))
