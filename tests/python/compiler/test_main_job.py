"""The README's main job (bench/maml_compiled.py) runs end to end: seven
variants train the same model to the same losses, and every measurement it
reports is present and sane."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def test_main_job_runs_and_the_variants_agree(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "maml_compiled.py"),
                          "--iterations", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "median meta-step time" in run.stdout
    result = json.loads(out.read_text())
    losses = result["losses"]
    assert set(losses) == {"eager unfused", "eager fused", "torch.func vmap",
                           "compiled, fusion off", "compiled per task", "compiled batched",
                           "compiled chunked"}
    for name, curve in losses.items():
        assert len(curve) == 2
        for a, b in zip(curve, losses["eager unfused"]):
            assert abs(a - b) <= 1e-4 * abs(b), (name, a, b)
    assert all(ms > 0 for ms in result["median_ms"].values())
    cold, warm = result["compile"]["cold"], result["compile"]["warm"]
    assert cold["first_task_ms"] > 0 and warm["first_task_ms"] > 0
    assert warm["report"]["forward"]["fusion_groups"] > 0
    assert result["compile"]["batched_cold"]["first_step_ms"] > 0
    memory = {name: m["peak_tensor_mib"] for name, m in result["memory"].items()}
    assert all(m > 0 for m in memory.values())
    # one task's saved values at a time: a fraction of the batched program's
    assert memory["compiled chunked"] < 0.25 * memory["compiled batched"], memory
