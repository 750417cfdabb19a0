"""The `metafuse` tool through fresh processes: every subcommand's --help,
exit status 2 on bad usage, 1 with a one-line error for bad paths, bad specs,
corrupted artifacts and failing scripts; compile -> inspect -> run of a job
artifact (loss falling, losses bit-equal to the in-process compiled step);
profile with a Chrome trace; the kernel cache commands."""

import json
import os
import zipfile

import pytest
import torch

from cli_helpers import cli, write_job_script
from metafuse.cli import main

COMMANDS = ("compile", "inspect", "run", "profile", "cache", "launch")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A job script, its compiled job artifact and the private kernel cache
    the compile filled."""
    root = tmp_path_factory.mktemp("cli")
    cache = root / "kernels"
    script = write_job_script(root)
    job = root / "job.mfa"
    # The fusion check on (the suite turns it off): inspect shows its choice.
    env = {"METAFUSE_CACHE_DIR": str(cache), "METAFUSE_FUSION_CHECK": "1"}
    done = cli("compile", f"{script}:meta_step", "-o", job, env=env)
    assert done.returncode == 0, done.stderr
    assert "job artifact" in done.stdout
    return {"root": root, "script": script, "job": job, "env": env, "cache": cache}


def in_process(capsys, *args):
    """main() in this process (for the error paths: a fresh process each
    would cost seconds of imports): (exit status, stdout, stderr)."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_help_of_every_subcommand(capsys):
    top = cli("--help")
    assert top.returncode == 0
    for command in COMMANDS:
        assert command in top.stdout
        code, out, _ = in_process(capsys, command, "--help")
        assert code == 0, command
        assert f"usage: metafuse {command}" in out


def test_bad_usage_exits_2(capsys):
    done = cli("run", "x.mfa", "--steps", "0")
    assert done.returncode == 2
    assert "--steps: expected an integer >= 1" in done.stderr
    for args in [(), ("frobnicate",), ("run",), ("cache", "shuffle"), ("compile", "a.py:f")]:
        code, _, err = in_process(capsys, *args)
        assert code == 2, args
        assert "usage: metafuse" in err


def one_line_error(done):
    assert done.returncode == 1, (done.stdout, done.stderr)
    first = done.stderr.splitlines()[0]
    assert first.startswith("metafuse: error: ")
    return first


def test_bad_paths_and_specs_exit_1(tmp_path, workspace, capsys):
    missing = tmp_path / "missing.mfa"
    assert "no such file" in one_line_error(cli("inspect", missing))

    def error(*args):
        code, _, err = in_process(capsys, *args)
        assert code == 1, args
        assert err.startswith("metafuse: error: ")
        return err.splitlines()[0]
    assert "no such file" in error("run", missing)
    assert "is a directory" in error("inspect", tmp_path)
    assert "no such file" in error("compile", "nope.py:f", "-o", tmp_path / "a.mfa")
    assert "expected SCRIPT.py:FUNCTION" in error("compile", workspace["script"], "-o",
                                                  tmp_path / "a.mfa")
    assert "defines no function 'absent'" in error("profile", f"{workspace['script']}:absent")
    assert "defines no function 'nothing'" in error(
        "profile", f"{workspace['script']}:meta_step", "--example", "nothing")
    assert "does not exist" in error("compile", f"{workspace['script']}:meta_step", "-o",
                                     tmp_path / "no" / "a.mfa")
    assert "--dir" in error("cache", "list", "--dir", tmp_path / "nowhere")


def test_a_failing_script_shows_its_traceback_summary(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\n\ndef f(x):\n    return x\n\n"
                      "def example_args():\n    raise ValueError('no data here')\n")
    done = cli("compile", f"{script}:f", "-o", tmp_path / "a.mfa")
    first = one_line_error(done)
    assert "example_args() failed: ValueError: no data here" in first
    assert f"{script}:7 in example_args" in done.stderr
    assert not (tmp_path / "a.mfa").exists()


def test_compile_inspect_and_run_a_job(workspace, tmp_path):
    job = workspace["job"]
    shown = cli("inspect", job)
    assert shown.returncode == 0, shown.stderr
    for text in ("job artifact", "step(state, *data) -> (new_state, metrics)",
                 "stage forward", "stage backward", "GEMMs", "memory plan", "Double[40, 1]"):
        assert text in shown.stdout, text
    summary = json.loads(cli("inspect", job, "--json").stdout)
    stages = summary["program"]["stages"]
    assert [s["name"] for s in stages] == ["forward", "backward"]
    assert sum(len(s["kernels"]) for s in stages) == summary["program"]["kernels"] > 0
    assert summary["manifest"]["job"]["metrics"] == ["loss"]
    # The saving process's measured choices (metafuse.tuning): at least the
    # fusion check of the compiled step, shown by inspect.
    choices = summary["manifest"]["tuning"]
    assert any(c["table"] == "fusion" and c["choice"] in ("fused", "unfused") for c in choices)
    assert f"measured choices when saved: {len(choices)}" in shown.stdout
    assert "fusion: program" in shown.stdout

    history = tmp_path / "history.json"
    done = cli("run", job, "--steps", 6, "--json", history, "--save-state", tmp_path / "s.pt")
    assert done.returncode == 0, done.stderr
    assert "step 6/6" in done.stdout
    losses = [m["loss"] for m in json.loads(history.read_text())["metrics"]]
    assert len(losses) == 6 and losses[-1] < losses[0]  # one fixed batch: it must fall
    state = torch.load(tmp_path / "s.pt")
    assert set(state) == {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}


def test_run_refuses_a_program_artifact(workspace, tmp_path):
    program = tmp_path / "program.mfa"
    made = cli("compile", f"{workspace['script']}:meta_step", "--example", "program_args",
               "-o", program, env=workspace["env"])
    assert made.returncode == 0, made.stderr
    assert "function artifact" in made.stdout
    assert "not a job" in one_line_error(cli("run", program))


def corrupt(source, target, change):
    with zipfile.ZipFile(source) as z:
        members = {n: z.read(n) for n in z.namelist()}
    change(members)
    with zipfile.ZipFile(target, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


def test_corrupted_and_truncated_artifacts_exit_1(workspace, tmp_path, capsys):
    flipped = tmp_path / "flipped.mfa"

    def flip(members):
        data = bytearray(members["job.pt"])
        data[len(data) // 2] ^= 0xFF
        members["job.pt"] = bytes(data)
    corrupt(workspace["job"], flipped, flip)
    code, _, err = in_process(capsys, "run", flipped)
    assert code == 1 and "checksum of job.pt" in err.splitlines()[0]
    truncated = tmp_path / "truncated.mfa"
    data = workspace["job"].read_bytes()
    truncated.write_bytes(data[:len(data) // 3])
    assert "truncated" in one_line_error(cli("inspect", truncated))


def test_profile_prints_both_tables_and_writes_a_trace(workspace, tmp_path):
    trace = tmp_path / "trace.json"
    done = cli("profile", f"{workspace['script']}:meta_step", "--trace", trace,
               env=workspace["env"])
    assert done.returncode == 0, done.stderr
    assert "--- fused ---" in done.stdout and "--- unfused ---" in done.stdout
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert len(events) > 0


def test_cache_list_verify_and_clear(workspace, capsys):
    env, cache = workspace["env"], workspace["cache"]
    listed = cli("cache", "list", env=env)
    assert listed.returncode == 0
    count = len(list(cache.glob("*.kernel")))
    assert count > 0
    assert f"{count} entries" in listed.stdout
    assert in_process(capsys, "cache", "verify", "--dir", cache)[0] == 0
    victim = sorted(cache.glob("*.kernel"))[0]
    data = bytearray(victim.read_bytes())
    data[-20] ^= 0xFF
    victim.write_bytes(bytes(data))
    code, out, err = in_process(capsys, "cache", "verify", "--dir", cache)
    assert code == 1 and "1 corrupted entries" in err.splitlines()[0]
    assert victim.name in out
    cleared = cli("cache", "clear", env=env)
    assert cleared.returncode == 0 and f"removed {count} files" in cleared.stdout
    assert not list(cache.glob("*.kernel"))


def test_a_function_that_falls_back_is_not_saved(tmp_path, capsys):
    script = tmp_path / "cumulative.py"
    script.write_text("import torch\nimport metafuse as mf\n\n"
                      "def f(w, xs):\n    return w - 0.1 * mf.grad((w * xs.cumprod(0)).sum(), w)\n\n"
                      "def example_args():\n"
                      "    return (torch.ones(3, dtype=torch.float64),\n"
                      "            torch.ones(2, 3, dtype=torch.float64))\n")
    code, _, err = in_process(capsys, "compile", f"{script}:f", "-o", tmp_path / "f.mfa")
    assert code == 1
    assert "f could not be compiled" in err.splitlines()[0]
    assert "aten::cumprod" in err.splitlines()[0]
    assert not (tmp_path / "f.mfa").exists()
