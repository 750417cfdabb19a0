"""The CLI's parts: the program summary agrees with the program value, the
guard decodes to dtypes and shapes, the progress bar stays silent for short
runs and shows on a terminal, and tools/install_cli.sh writes a launcher
that runs the tool (a pip install: its console script runs the tool)."""

import io
import os
import subprocess
import sys

import pytest
import torch

import metafuse as mf
from metafuse.cli.program_summary import decode_guard, summarize
from metafuse.cli.progress import Progress
from cli_helpers import REPO
from package_under_test import INSTALLED


def test_summary_counts_match_the_program_value():
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    params = dict(net.named_parameters())
    x, y = torch.randn(6, 2), torch.randn(6, 1)

    def loss_fn(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
    program = mf.compile_inner_loop(loss_fn, mf.sgd(0.1), steps=2).program(params, x, y)
    summary = summarize(program)
    assert [s["name"] for s in summary["stages"]] == ["forward", "backward"]
    assert sum(len(s["kernels"]) for s in summary["stages"]) == program.num_kernels
    assert summary["inputs"] == program.num_inputs
    # params flatten in sorted key order, then the batch
    assert summary["guard"] == ["Float[8] cpu", "Float[8, 2] cpu", "Float[1] cpu",
                                "Float[1, 8] cpu", "Float[6, 2] cpu", "Float[6, 1] cpu"]
    forward = summary["stages"][0]
    assert forward["instructions"] == sum(forward["by_kind"].values()) > 0
    assert forward["fused_outputs_reusing"] <= forward["fused_outputs"]


def test_guard_decoding():
    # Double [10, 1] strides [1, 1] on the CPU; an int 3; an undefined tensor.
    assert decode_guard([7, -1, 2, 10, 1, 1, 1, -2, 3, -1]) == [
        "Double[10, 1] cpu", "int 3", "undefined tensor"]
    assert decode_guard([]) == []


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_silent_for_short_runs_and_drawn_on_a_terminal():
    quiet = io.StringIO()
    bar = Progress(10, stream=quiet, delay=60.0)
    for i in range(10):
        bar.update(i + 1)
    bar.close()
    assert quiet.getvalue() == ""
    late = io.StringIO()
    bar = Progress(4, stream=late, delay=0.0, interval=0.0)
    for i in range(4):
        bar.update(i + 1)
    assert late.getvalue().count("\n") == 4 and "step 4/4 100.0%" in late.getvalue()
    tty = FakeTerminal()
    bar = Progress(3, stream=tty, delay=60.0, interval=0.0)
    for i in range(3):
        bar.update(i + 1)
    bar.close()
    assert tty.getvalue().startswith("\r[") and tty.getvalue().endswith("\n")


@pytest.mark.skipif(INSTALLED, reason="the launcher runs this checkout's frontend/python "
                    "(the Bazel build), not the installed package under test")
def test_install_cli_writes_a_working_launcher(tmp_path):
    done = subprocess.run(["bash", os.path.join(REPO, "tools", "install_cli.sh"),
                           str(tmp_path / "bin")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    launcher = tmp_path / "bin" / "metafuse"
    assert os.access(launcher, os.X_OK)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run([str(launcher), "cache", "list", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=env, cwd="/")
    assert ran.returncode == 0, ran.stderr
    assert "0 entries" in ran.stdout


@pytest.mark.skipif(not INSTALLED, reason="only a pip-installed metafuse has a console script")
def test_pip_installed_console_script_runs(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "metafuse")
    assert os.access(script, os.X_OK), f"pip installed no `metafuse` script beside {sys.executable}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run([script, "cache", "list", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=env, cwd="/")
    assert ran.returncode == 0, ran.stderr
    assert "0 entries" in ran.stdout
