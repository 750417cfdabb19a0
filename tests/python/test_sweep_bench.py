"""bench/sweep.py runs end to end at its smallest setting (the sinusoid MLP,
1 thread, inner Adam, 1 timed meta-step, and the chunked vmap at 5 tasks a
chunk; the torch.compile variants left out with --variants, peak memory for
the peers and metafuse's variants only, --memory-variants): the JSON holds
every requested cell, every variant ran (no error, no compilation fallback)
or, for a peer that is not installed, says so; the compiled variants
compiled once, every meta-gradient is as close to the float64 truth as the
sweep demands (no GRADIENT MISMATCH; higher's Adam, another formula, as close
to plain PyTorch with that formula), and the chunked meta-step peaks lower
than the one batched call.

On torch 2.x two more runs (sinusoid, inner SGD, 1 timed meta-step, no
memory processes): "torch.compile plain" is recorded as a cell, refused with
torch's message or timed; "torch.compile func" runs and gives plain
PyTorch's second-order meta-gradient. Each compiles with inductor, so they
are the slow ones: measured on 2 cores shared with a C++ build (load 5-7),
torch.compile plain 45 s and torch.compile func 77 s (inductor's compile is
~35 s of it, on an idle machine the whole test about 45 s)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from package_under_test import PACKAGE_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEP = os.path.join(ROOT, "bench", "sweep.py")
HIGHER = "higher 0.2.1"
PEERS = {"TorchOpt 0.7.3", HIGHER}
SMOKE = ["eager metafuse", "plain PyTorch", "torch.func vmap", "TorchOpt 0.7.3", HIGHER,
         "compiled per task", "compiled batched", "compiled chunked"]
# one fresh process each (import torch and metafuse: ~4 s of CPU apiece)
SMOKE_MEMORY = ["eager metafuse", "TorchOpt 0.7.3", HIGHER, "compiled batched",
                "compiled chunked"]
requires_torch_compile = pytest.mark.skipif(not hasattr(torch, "compile"),
                                            reason="torch 1.13 has no torch.compile")


def run_sweep(tmp_path, args, timeout):
    out = tmp_path / "sweep.json"
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    run = subprocess.run([sys.executable, SWEEP, "--models", "sinusoid", "--threads", "1",
                          "--repeats", "1", "--json", str(out)] + args,
                         capture_output=True, text=True, timeout=timeout, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return run, json.loads(out.read_text())


def within_truth_factor(result, cells, distance):
    """float32 run: within truth_factor x plain's distance to the float64
    truth (plain itself float32-close to it)."""
    return distance <= result["truth_factor"] * max(
        cells["plain PyTorch"]["grad_vs_float64"], 1e-7)


def test_smallest_sweep_has_every_cell_and_the_gradients_agree(tmp_path):
    run, result = run_sweep(tmp_path, ["--optimizers", "adam", "--chunk-size", "5",
                                       "--variants", ",".join(SMOKE),
                                       "--memory-variants", ",".join(SMOKE_MEMORY)], 150)
    assert set(result["cells"]) == {"sinusoid/adam"}
    assert set(result["memory"]) == {"sinusoid/adam"}
    for key, by_threads in result["cells"].items():
        assert set(by_threads) == {"1"}
        cells = by_threads["1"]
        assert set(cells) == set(SMOKE)
        assert set(result["memory"][key]) == set(SMOKE_MEMORY)
        for name, cell in cells.items():
            if name in PEERS and "skipped" in cell:
                assert cell["skipped"].startswith("not installed"), cell
                assert result["memory"][key].get(name, {"skipped": "did not run in the timing"}
                                                 ) == {"skipped": "did not run in the timing"}
                continue
            assert "error" not in cell, (key, name, cell)
            assert cell["median_ms"] > 0 and cell["first_call_ms"] > 0
            assert len(cell["times_ms"]) == 1
            if name == HIGHER:  # torch.optim.Adam's formula, said in the cell
                assert "another Adam" in cell["note"]
                assert within_truth_factor(result, cells, cell["grad_vs_torch_adam_plain"]), cell
            else:
                assert within_truth_factor(result, cells, cell["grad_vs_float64"]), (name, cell)
            if name.startswith("compiled"):
                assert cell["fallback"] == [], (key, name, cell["fallback"])
                # the chunked forward runs the forward-only program: one more
                assert cell["compile_count"] == (2 if name == "compiled chunked" else 1)
            if name in SMOKE_MEMORY:
                memory = result["memory"][key][name]
                assert "error" not in memory and memory["peak_tensor_mib"] >= 0
        assert cells["plain PyTorch"]["grad_vs_float64"] < 1e-3, cells["plain PyTorch"]
        memory = result["memory"][key]
        assert (memory["compiled chunked"]["peak_tensor_mib"]
                < 0.5 * memory["compiled batched"]["peak_tensor_mib"]), memory
    assert "| sinusoid | adam | 1 | compiled batched |" in run.stdout
    assert "| sinusoid | adam | 1 | torch.func vmap |" in run.stdout
    assert "GRADIENT MISMATCH" not in run.stdout


def torch_compile_cell(tmp_path, name):
    run, result = run_sweep(tmp_path, ["--optimizers", "sgd", "--no-memory",
                                       "--variants", name], 300)
    cells = result["cells"]["sinusoid/sgd"]["1"]
    assert set(cells) == {"eager metafuse", "plain PyTorch", name}
    return run, result, cells[name]


@requires_torch_compile
def test_torch_compile_plain_is_recorded_as_a_cell(tmp_path):
    """Refused (AOTAutograd's double backward) with the message in the cell
    and the table, or, should a torch run it, timed with its gradient checked."""
    run, _, cell = torch_compile_cell(tmp_path, "torch.compile plain")
    row = [line for line in run.stdout.splitlines()
           if line.startswith("| sinusoid | sgd | 1 | torch.compile plain |")]
    assert len(row) == 1, run.stdout
    if "refused" in cell:
        assert set(cell) == {"refused"} and cell["refused"], cell
        assert "refused: " + cell["refused"][:60] in row[0]
    else:
        assert "error" not in cell, cell
        assert cell["median_ms"] > 0 and cell["first_call_ms"] > 0
        assert "GRADIENT MISMATCH" not in row[0]


@requires_torch_compile
def test_torch_compile_func_gives_the_second_order_meta_gradient(tmp_path):
    """SLOW (over a minute on 2 busy cores): one inductor compile of the
    vmapped second-order meta-step."""
    run, result, cell = torch_compile_cell(tmp_path, "torch.compile func")
    cells = result["cells"]["sinusoid/sgd"]["1"]
    assert "error" not in cell, cell
    assert cell["median_ms"] > 0 and cell["first_call_ms"] > 0
    assert cell["dynamo_graphs"] >= 1 and cell["recompiles"] == 0, cell
    assert within_truth_factor(result, cells, cell["grad_vs_float64"]), cell
    assert "| sinusoid | sgd | 1 | torch.compile func |" in run.stdout
    assert "GRADIENT MISMATCH" not in run.stdout
    assert "the fastest torch 2.x variant with the same meta-gradient" in run.stdout
