"""Trusting artifacts (docs/aot.md, "Trust"): an artifact's native code runs
only when it is signed with the key the loader holds, or loaded with
trust=True; otherwise its kernels are printed here from their kernel IR and
its pickles load as tensors and containers only. A changed byte or another
key is refused with a message; old (format 2) artifacts read as unsigned;
`metafuse inspect` shows the signature. The native-code side (which code a
fresh process runs) is in test_fresh_process.py, the C++ runner's in
test_cpp_runner.py."""

import hashlib
import hmac
import io
import json
import pathlib
import zipfile

import pytest
import torch

import metafuse as mf
from metafuse import aot
from cli_helpers import cli

KEY = bytes(range(32))
KEY_HEX = KEY.hex()
OTHER_KEY = bytes(range(1, 33))
RECORD = len("metafuse-signature hmac-sha256 ") + 64


def fingerprint(key):
    return hashlib.sha256(key).hexdigest()[:16]


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch):
    monkeypatch.delenv(aot.KEY_VARIABLE, raising=False)


def make(tmp_path, name="a.mfa", **save_options):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 20), torch.nn.Tanh(),
                              torch.nn.Linear(20, 1)).double()
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x = torch.linspace(-2, 2, 8, dtype=torch.float64).unsqueeze(1)
    y = torch.sin(x)
    loss_fn = lambda p, x, y: torch.nn.functional.mse_loss(mf.functional_call(net, p, x), y)
    adapt = mf.compile_inner_loop(loss_fn, mf.sgd(0.05), steps=2)
    path = tmp_path / name
    aot.save(adapt, str(path), params, x, y, **save_options)
    return path, adapt, (params, x, y)


def test_the_signature_is_an_hmac_of_every_byte_before_it(tmp_path):
    path, _, _ = make(tmp_path, key=KEY)
    data = path.read_bytes()
    record = data[-RECORD:]
    assert record.startswith(b"metafuse-signature hmac-sha256 ")
    want = hmac.new(KEY, data[:-RECORD], hashlib.sha256).hexdigest()  # a cross-check only
    assert record[-64:].decode() == want
    assert zipfile.ZipFile(path).comment == record  # a zip comment: zip readers still read it


def test_signed_with_the_key_is_trusted_and_gives_the_compiled_numbers(tmp_path):
    path, adapt, args = make(tmp_path, key=KEY)
    for key in (KEY, KEY_HEX, KEY_HEX.upper() + "\n"):
        loaded = aot.load(str(path), key=key)
        assert loaded.trusted
        assert loaded.signature == f"signed (HMAC-SHA256), verified with key {fingerprint(KEY)}"
    got, want = loaded(*args), adapt(*args)
    for k in want:
        assert torch.equal(got[k], want[k]), k


def test_the_key_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(aot.KEY_VARIABLE, KEY_HEX)
    path, _, _ = make(tmp_path)  # signed with the environment's key
    assert aot.load(str(path)).trusted
    monkeypatch.delenv(aot.KEY_VARIABLE)
    loaded = aot.load(str(path))
    assert not loaded.trusted
    assert loaded.signature == "signed (HMAC-SHA256), not verified (no key)"
    monkeypatch.setenv(aot.KEY_VARIABLE, "nothex!!")
    with pytest.raises(ValueError, match="METAFUSE_ARTIFACT_KEY: the key holds a character"):
        aot.load(str(path))


def test_unsigned_runs_from_kernel_ir_with_the_same_numbers(tmp_path):
    path, adapt, args = make(tmp_path)
    assert zipfile.ZipFile(path).comment == b""
    untrusted = aot.load(str(path), key=KEY)  # a key does not make an unsigned file trusted
    assert not untrusted.trusted and untrusted.signature == "unsigned"
    trusted = aot.load(str(path), trust=True)
    assert trusted.trusted
    got, native, want = untrusted(*args), trusted(*args), adapt(*args)
    for k in want:
        assert torch.equal(got[k], want[k]) and torch.equal(native[k], want[k]), k


def test_an_untrusted_program_keeps_only_its_kernel_ir(tmp_path):
    path, _, _ = make(tmp_path)
    program = aot.read(str(path)).program
    assert any(program.object_targets) or program.shared_objects  # it carries host code
    size = len(program.serialize())
    program.rebuild_kernels_from_kernel_ir()
    assert not any(program.object_targets) and not program.shared_objects
    assert len(program.serialize()) < size  # the native code is gone


def test_a_changed_byte_of_a_signed_artifact_is_refused(tmp_path):
    path, _, _ = make(tmp_path, key=KEY)
    data = bytearray(path.read_bytes())
    info = zipfile.ZipFile(path).getinfo("constants.pt")
    data[info.header_offset + 30 + len(info.filename) + 10] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(aot.ArtifactError,
                       match=f"signature does not verify with key {fingerprint(KEY)}: it was "
                             "changed after signing"):
        aot.load(str(path), key=KEY)


def test_another_key_is_refused_unless_trusted(tmp_path):
    path, adapt, args = make(tmp_path, key=KEY)
    with pytest.raises(aot.ArtifactError) as refused:
        aot.load(str(path), key=OTHER_KEY)
    message = str(refused.value)
    assert f"does not verify with key {fingerprint(OTHER_KEY)}" in message
    assert "load it with the key it was signed with, or pass trust=True" in message
    loaded = aot.load(str(path), key=OTHER_KEY, trust=True)
    assert loaded.trusted
    got, want = loaded(*args), adapt(*args)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_bad_keys_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="metafuse.aot.save: `key`: the key has 4 bytes"):
        make(tmp_path, key=b"abcd")
    with pytest.raises(ValueError, match="`key`: the key holds a character that is not a "
                                         "hexadecimal digit"):
        aot.load(str(tmp_path / "none.mfa"), key="xyz!" * 8)
    with pytest.raises(TypeError, match="`key` must be bytes"):
        aot.load(str(tmp_path / "none.mfa"), key=12)
    key_file = tmp_path / "key.hex"
    key_file.write_text(KEY_HEX + "\n")
    assert aot.read_key_file(key_file) == KEY


def test_untrusted_pickles_load_tensors_and_containers_only(tmp_path):
    path, _, _ = make(tmp_path)
    marker = tmp_path / "pickle-ran"

    class Payload:  # unpickling it would create `marker`
        def __reduce__(self):
            return (pathlib.Path.touch, (marker,))

    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    buffer = io.BytesIO()
    torch.save({"closed_over": [], "output": Payload()}, buffer)
    members["constants.pt"] = buffer.getvalue()
    manifest = json.loads(members["manifest.json"])
    manifest["sha256"]["constants.pt"] = hashlib.sha256(members["constants.pt"]).hexdigest()
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as z:  # a crafted file, its checksums right
        for name, data in members.items():
            z.writestr(name, data)
    with pytest.raises(aot.ArtifactError, match="is not trusted, and its constants.pt holds "
                                                "pickled objects other than tensors"):
        aot.load(str(path))
    assert not marker.exists()


def test_format_2_artifacts_read_as_unsigned(tmp_path):
    path, adapt, args = make(tmp_path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    manifest = json.loads(members["manifest.json"])
    assert manifest["format"] == "metafuse-aot 3"
    manifest["format"] = "metafuse-aot 2"
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    loaded = aot.load(str(path), key=KEY)
    assert not loaded.trusted and loaded.signature == "unsigned"
    got, want = loaded(*args), adapt(*args)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_inspect_shows_the_signature(tmp_path):
    signed, _, _ = make(tmp_path, "signed.mfa", key=KEY)
    unsigned, _, _ = make(tmp_path, "unsigned.mfa")
    key_file = tmp_path / "key.hex"
    key_file.write_text(KEY_HEX)
    other_file = tmp_path / "other.hex"
    other_file.write_text(OTHER_KEY.hex())
    env = {aot.KEY_VARIABLE: ""}

    shown = cli("inspect", unsigned, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "signature: unsigned\n" in shown.stdout
    assert "native code: does not run; its kernels are printed from their kernel IR" \
        in shown.stdout

    shown = cli("inspect", signed, env=env)
    assert "signature: signed (HMAC-SHA256), not verified (no key)\n" in shown.stdout

    shown = cli("inspect", signed, "--key-file", key_file, env=env)
    assert shown.returncode == 0, shown.stderr
    assert (f"signature: signed (HMAC-SHA256), verified with key {fingerprint(KEY)}\n"
            in shown.stdout)
    assert "native code: runs when loaded (trusted)" in shown.stdout
    assert json.loads(cli("inspect", signed, "--key-file", key_file, "--json",
                          env=env).stdout)["trusted"] is True

    refused = cli("inspect", signed, "--key-file", other_file, env=env)
    assert refused.returncode == 1
    assert f"does not verify with key {fingerprint(OTHER_KEY)}" in refused.stderr
    assert "or pass --trust if you trust where it came from" in refused.stderr
    assert cli("inspect", signed, "--key-file", other_file, "--trust", env=env).returncode == 0
    bad = cli("inspect", signed, "--key-file", tmp_path / "missing.hex", env=env)
    assert bad.returncode == 1 and "--key-file: key file" in bad.stderr
