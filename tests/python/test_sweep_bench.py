"""bench/sweep.py runs end to end at its smallest setting (the sinusoid MLP,
1 thread, inner Adam, 1 timed meta-step, and the chunked vmap at 5 tasks a
chunk): the JSON holds every requested cell, every variant ran (no error, no
compilation fallback), the compiled variants compiled once, every
meta-gradient is as close to the float64 truth as the sweep demands (no
GRADIENT MISMATCH), and the chunked meta-step peaks lower than the one
batched call."""

import json
import os
import subprocess
import sys

from package_under_test import PACKAGE_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANTS = {"eager metafuse", "plain PyTorch", "functorch vmap", "compiled per task",
            "compiled batched", "compiled chunked"}


def test_smallest_sweep_has_every_cell_and_the_gradients_agree(tmp_path):
    out = tmp_path / "sweep.json"
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sweep.py"),
                          "--models", "sinusoid", "--threads", "1", "--optimizers",
                          "adam", "--repeats", "1", "--chunk-size", "5", "--json", str(out)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["cells"]) == {"sinusoid/adam"}
    assert set(result["memory"]) == {"sinusoid/adam"}
    for key, by_threads in result["cells"].items():
        assert set(by_threads) == {"1"}
        cells = by_threads["1"]
        assert set(cells) == VARIANTS
        for name, cell in cells.items():
            assert "error" not in cell, (key, name, cell)
            assert cell["median_ms"] > 0 and cell["first_call_ms"] > 0
            assert len(cell["times_ms"]) == 1
            # float32 run: each variant within truth_factor x plain's distance to
            # the float64 truth, and plain itself float32-close to it
            assert cell["grad_vs_float64"] <= result["truth_factor"] * max(
                cells["plain PyTorch"]["grad_vs_float64"], 1e-7), (key, name, cell)
            if name.startswith("compiled"):
                assert cell["fallback"] == [], (key, name, cell["fallback"])
                # the chunked forward runs the forward-only program: one more
                assert cell["compile_count"] == (2 if name == "compiled chunked" else 1)
            memory = result["memory"][key][name]
            assert "error" not in memory and memory["peak_tensor_mib"] >= 0
        assert cells["plain PyTorch"]["grad_vs_float64"] < 1e-3, cells["plain PyTorch"]
        memory = result["memory"][key]
        assert (memory["compiled chunked"]["peak_tensor_mib"]
                < 0.5 * memory["compiled batched"]["peak_tensor_mib"]), memory
    assert "| sinusoid | adam | 1 | compiled batched |" in run.stdout
    assert "GRADIENT MISMATCH" not in run.stdout
