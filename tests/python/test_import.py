import subprocess
import sys

import torch

import metafuse


def test_import_together_with_torch_in_a_fresh_interpreter():
    # The README promises exactly this command after the build.
    out = subprocess.run(
        [sys.executable, "-c", "import torch, metafuse; print(metafuse.__version__)"],
        capture_output=True, text=True, check=True,
        env={"PYTHONPATH": ":".join(p for p in sys.path if p)})
    assert out.stdout.strip() == metafuse.__version__


def test_an_interpreter_without_torch_is_told_which_torch_to_get():
    # torch made unimportable in the child (sys.modules[name] = None): the
    # ImportError names the tested torch versions and the project venv.
    out = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['torch'] = None; import metafuse"],
        capture_output=True, text=True,
        env={"PYTHONPATH": ":".join(p for p in sys.path if p)})
    assert out.returncode != 0
    assert "metafuse needs PyTorch (tested with torch 2.15.0 and 1.13.1)" in out.stderr, out.stderr
    assert "tools/setup_venv.sh" in out.stderr and sys.executable in out.stderr


def test_operators_are_registered_with_the_dispatcher():
    assert hasattr(torch.ops.metafuse, "ema_update")
    schema = str(torch.ops.metafuse.ema_update.default._schema)
    assert schema.startswith("metafuse::ema_update(Tensor moment, Tensor update")


def test_build_info_reports_versions():
    info = metafuse.build_info()
    assert info["torch_version"] == torch.__version__.split("a")[0].split("+")[0]
    assert "x86_64" in info["llvm_host"] or "aarch64" in info["llvm_host"]
    assert isinstance(info["nvrtc"], bool)
