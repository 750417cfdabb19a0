"""bench/vmap_chunks.py runs end to end at its smallest setting (one repeat,
the whole meta-batch and one task per chunk): every variant is measured,
the meta-gradients agree, and one task per chunk peaks at a fraction of the
one program's tensor memory."""

import json
import os
import subprocess
import sys

from package_under_test import PACKAGE_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_chunk_sizes_bench_measures_every_variant(tmp_path):
    out = tmp_path / "chunks.json"
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "vmap_chunks.py"),
                          "--chunk-sizes", "none,1", "--repeats", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert set(rows) == {"eager metafuse", "chunk_size=None", "chunk_size=1"}
    for name, row in rows.items():
        assert row["median_ms"] > 0 and row["peak_tensor_mib"] > 0, (name, row)
        assert row["grad_max_rel_diff"] < 1e-4, (name, row)  # float32 rounding only
    assert rows["chunk_size=1"]["peak_tensor_mib"] < 0.25 * rows["chunk_size=None"][
        "peak_tensor_mib"], rows
    assert "| chunk_size=1 |" in run.stdout
