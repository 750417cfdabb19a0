"""The C++ runner (metafuse/aot.h, examples/cpp/maml_aot.cc): a job
artifact made by Python trains in a process with LibTorch and no Python
interpreter, step for step bit-equal to metafuse.aot.load_job in Python;
damaged artifacts are refused with the failed check and exit code 1. Trust
(docs/aot.md): the runner runs an artifact's native code only when it is
signed with the key it is given (--key-file, METAFUSE_ARTIFACT_KEY) or run
with --trust; it links no compiler, so it refuses an untrusted artifact,
saying how to trust it."""

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


KEY = "8f2a" * 8
OTHER_KEY = "17c3" * 8


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    (directory / "key.hex").write_text(KEY + "\n")
    (directory / "other.hex").write_text(OTHER_KEY + "\n")
    return directory


@pytest.fixture(scope="module")
def job(tmp_path_factory, keys):
    """A job artifact signed with KEY."""
    directory = tmp_path_factory.mktemp("cpp_runner")
    script = write_job_script(directory)
    path = directory / "job.mfa"
    made = cli("compile", f"{script}:meta_step", "-o", path, "--key-file", keys / "key.hex",
               env={"METAFUSE_ARTIFACT_KEY": ""})
    assert made.returncode == 0, made.stderr
    assert "job artifact, signed" in made.stdout
    return path


def run(*args, env=None):
    environment = {k: v for k, v in os.environ.items() if k != "METAFUSE_ARTIFACT_KEY"}
    environment.update(env or {})
    return subprocess.run([RUNNER, *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=environment)


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


def test_trains_without_python_bit_equal_to_python(job, keys):
    require_this_libtorch()
    ran = run(job, "--steps", 12, "--inspect", "--key-file", keys / "key.hex")
    assert ran.returncode == 0, ran.stderr
    assert "libpython loaded: no" in ran.stdout
    assert "job: 6 state tensors" in ran.stdout
    assert "signature: signed (HMAC-SHA256), verified with key" in ran.stdout
    assert "native code: the artifact's (trusted)" in ran.stdout
    cpp = losses_of(ran.stdout)
    _, history = aot.load_job(str(job), key=KEY).run(12)
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
    (lambda b: b.replace(b'"format": "metafuse-aot 3"', b'"format": "metafuse-aot 9"'),
     "format"),
    (lambda b: flip_a_byte_of(b, "program.bin"), "checksum of program.bin"),
])
def test_damaged_artifacts_are_refused(job, tmp_path, damage, message):
    # --trust: past the signature, to the check each damage fails.
    require_this_libtorch()
    data = job.read_bytes()
    damaged = damage(data)
    assert damaged != data
    path = tmp_path / "damaged.mfa"
    path.write_bytes(damaged)
    ran = run(path, "--steps", 1, "--trust")
    assert ran.returncode == 1
    assert message in ran.stderr
    assert "step 0" not in ran.stdout


def test_a_changed_byte_or_another_key_is_refused(job, keys, tmp_path):
    require_this_libtorch()
    path = tmp_path / "changed.mfa"
    path.write_bytes(flip_a_byte_of(job.read_bytes(), "program.bin"))
    for artifact, key in ((path, "key.hex"), (job, "other.hex")):
        ran = run(artifact, "--steps", 1, "--key-file", keys / key)
        assert ran.returncode == 1
        assert "its signature does not verify with key" in ran.stderr, ran.stderr
        assert "with LoadOptions::trust (--trust)" in ran.stderr
        assert "step 0" not in ran.stdout
    # The key from the environment, as hex.
    ran = run(job, "--steps", 1, env={"METAFUSE_ARTIFACT_KEY": OTHER_KEY})
    assert ran.returncode == 1 and "does not verify" in ran.stderr


def test_an_untrusted_artifact_is_refused_saying_how_to_trust_it(job, keys, tmp_path):
    require_this_libtorch()
    ran = run(job, "--steps", 1)  # signed, but no key: not trusted
    assert ran.returncode == 1
    assert ("is not trusted (signed (HMAC-SHA256), not verified (no key)), so its native "
            "code does not run") in ran.stderr, ran.stderr
    assert "links only the runtime" in ran.stderr
    assert "the runner's --key-file" in ran.stderr and "the runner's --trust" in ran.stderr
    assert "step 0" not in ran.stdout
    # The signature record removed (and the comment length with it): an
    # unsigned artifact, refused even with the key.
    unsigned = tmp_path / "unsigned.mfa"
    unsigned.write_bytes(job.read_bytes()[:-97] + b"\0\0")
    assert zipfile.ZipFile(unsigned).comment == b""
    ran = run(unsigned, "--steps", 1, "--key-file", keys / "key.hex")
    assert ran.returncode == 1 and "step 0" not in ran.stdout
    assert "is not trusted (unsigned)" in ran.stderr, ran.stderr
    # --trust: the artifact's own code runs.
    ran = run(job, "--steps", 2, "--trust", env={"METAFUSE_ARTIFACT_KEY": OTHER_KEY})
    assert ran.returncode == 0, ran.stderr
    assert losses_of(ran.stdout) == [h["loss"] for h in aot.load_job(str(job), key=KEY).run(2)[1]]


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


def test_bad_usage_exits_2(job, tmp_path):
    assert run().returncode == 2
    assert run(job, "--steps", "many").returncode == 2
    assert run(job, "--key-file").returncode == 2
    bad = tmp_path / "bad.hex"
    bad.write_text("xyz")
    ran = run(job, "--key-file", bad)
    assert ran.returncode == 2 and "--key-file: key file" in ran.stderr
