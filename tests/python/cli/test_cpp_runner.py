"""The C++ runner (metafuse/aot.h, examples/cpp/maml_aot.cc): a job
artifact made by Python trains in a process with LibTorch and no Python
interpreter, step for step bit-equal to metafuse.aot.load_job in Python;
damaged artifacts are refused with the failed check and exit code 1."""

import io
import os
import re
import subprocess
import zipfile

import pytest

import metafuse.aot as aot
from cli_helpers import REPO, cli, write_job_script

RUNNER = os.path.join(REPO, "bazel-bin", "examples", "cpp", "maml_aot")

pytestmark = pytest.mark.skipif(
    not os.access(RUNNER, os.X_OK),
    reason="the C++ runner is not built: bazel build //examples/cpp:maml_aot "
           "(tools/test_all.sh builds it before pytest)")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cpp_runner")
    script = write_job_script(directory)
    path = directory / "job.mfa"
    made = cli("compile", f"{script}:meta_step", "-o", path)
    assert made.returncode == 0, made.stderr
    return path


def run(*args):
    return subprocess.run([RUNNER, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def losses_of(stdout):
    return [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)$", stdout, re.M)]


def runner_libtorch():
    """The directory of the libtorch_cpu the runner links (from ldd), or None."""
    linked = subprocess.run(["ldd", RUNNER], capture_output=True, text=True).stdout
    found = re.search(r"libtorch_cpu\.so\S* => (\S+)", linked)
    return os.path.dirname(os.path.realpath(found.group(1))) if found else None


def require_this_libtorch():
    """Artifacts record the LibTorch that made them and the runner refuses
    another one first (before any other check); CI builds the runner against
    Debian's 1.13.1 and runs the suite on the venv's torch 2.x."""
    import torch
    linked = runner_libtorch()
    ours = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib"))
    if linked is not None and linked != ours:
        pytest.skip(f"the C++ runner links the LibTorch in {linked}, not this interpreter's "
                    f"torch {torch.__version__} ({ours}); its artifacts are refused there "
                    "(bazel build --config=torch2 //examples/cpp:maml_aot for the venv's)")


def test_trains_without_python_bit_equal_to_python(job):
    require_this_libtorch()
    ran = run(job, "--steps", 12, "--inspect")
    assert ran.returncode == 0, ran.stderr
    assert "libpython loaded: no" in ran.stdout
    assert "job: 6 state tensors" in ran.stdout
    cpp = losses_of(ran.stdout)
    _, history = aot.load_job(str(job)).run(12)
    assert cpp == [h["loss"] for h in history]  # float64, printed with 17 digits
    assert min(cpp[-4:]) < cpp[0]  # meta-training makes progress


def test_the_binary_does_not_link_libpython():
    linked = subprocess.run(["ldd", RUNNER], capture_output=True, text=True).stdout
    assert "libtorch_cpu" in linked
    assert "libpython" not in linked


def flip_a_byte_of(archive, member):
    info = zipfile.ZipFile(io.BytesIO(archive)).getinfo(member)
    at = info.header_offset + 30 + len(info.filename) + info.file_size // 2
    return archive[:at] + bytes([archive[at] ^ 0x40]) + archive[at + 1:]


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:len(b) // 2], "truncated"),
    (lambda b: b.replace(b'"format": "metafuse-aot 2"', b'"format": "metafuse-aot 9"'),
     "format"),
    (lambda b: flip_a_byte_of(b, "program.bin"), "checksum of program.bin"),
])
def test_damaged_artifacts_are_refused(job, tmp_path, damage, message):
    require_this_libtorch()
    data = job.read_bytes()
    damaged = damage(data)
    assert damaged != data
    path = tmp_path / "damaged.mfa"
    path.write_bytes(damaged)
    ran = run(path, "--steps", 1)
    assert ran.returncode == 1
    assert message in ran.stderr
    assert "step 0" not in ran.stdout


def test_an_artifact_of_another_libtorch_is_refused_naming_both(job):
    import torch
    linked = runner_libtorch()
    ours = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib"))
    if linked is None or linked == ours:
        pytest.skip("the C++ runner links this interpreter's LibTorch")
    ran = run(job, "--steps", 1)
    assert ran.returncode == 1
    assert f"it was made with LibTorch {torch.__version__.split('+')[0]}" in ran.stderr, ran.stderr
    assert "recompile it" in ran.stderr
    assert "step 0" not in ran.stdout


def test_bad_usage_exits_2(job):
    assert run().returncode == 2
    assert run(job, "--steps", "many").returncode == 2
