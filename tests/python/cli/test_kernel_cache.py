"""metafuse.kernel_cache reads the runtime's on-disk entry layout: intact
entries decode (kernel name, target, versions), and bad magic, truncation,
a flipped byte and a misnamed file are each reported; clear removes entries
and leftover temporary files only; the directory follows the environment."""

import os

import pytest

from metafuse import kernel_cache

SEED = 0x9e3779b97f4a7c15


def u64(n):
    return n.to_bytes(8, "little")


def make_entry(directory, ir="; metafuse kernel fused_abc\ndefine void @x()",
               target="x86_64 avx2", versions="metafuse test", obj=b"\x7fELF..."):
    key = b"".join(u64(len(p)) + p for p in (ir.encode(), target.encode(), versions.encode()))
    body = kernel_cache.MAGIC + u64(len(key)) + key + u64(len(obj)) + obj
    data = body + u64(kernel_cache._fnv1a(body))
    name = f"{kernel_cache._fnv1a(key):016x}{kernel_cache._fnv1a(key, SEED):016x}.kernel"
    path = os.path.join(str(directory), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_an_intact_entry_decodes(tmp_path):
    make_entry(tmp_path)
    (entry,) = kernel_cache.entries(str(tmp_path))
    assert entry.problem is None
    assert (entry.kernel, entry.target, entry.versions) == ("fused_abc", "x86_64 avx2",
                                                            "metafuse test")


@pytest.mark.parametrize("damage, problem", [
    (lambda d: b"XXXXX\n" + d[6:], "bad magic"),
    (lambda d: d[:len(d) // 2], "truncated"),
    (lambda d: d[:-12] + bytes([d[-12] ^ 1]) + d[-11:], "checksum mismatch"),
])
def test_damaged_entries_are_reported(tmp_path, damage, problem):
    path = make_entry(tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(damage(data))
    (entry,) = kernel_cache.entries(str(tmp_path))
    assert problem in entry.problem


def test_a_misnamed_entry_is_reported(tmp_path):
    path = make_entry(tmp_path)
    os.rename(path, os.path.join(str(tmp_path), "0" * 32 + ".kernel"))
    (entry,) = kernel_cache.entries(str(tmp_path))
    assert "not the hash of its key" in entry.problem


def test_clear_removes_entries_and_temporaries_only(tmp_path):
    make_entry(tmp_path)
    make_entry(tmp_path, ir="other")
    (tmp_path / "x.kernel.tmp.12.0.7").write_bytes(b"half")
    (tmp_path / "notes.txt").write_text("keep me")
    removed, freed = kernel_cache.clear(str(tmp_path))
    assert removed == 3 and freed > 0
    assert os.listdir(str(tmp_path)) == ["notes.txt"]
    assert kernel_cache.entries(str(tmp_path / "absent")) == []


def test_directory_follows_the_environment(monkeypatch):
    monkeypatch.setenv("METAFUSE_CACHE_DIR", "/somewhere/kernels/")
    assert kernel_cache.directory() == "/somewhere/kernels"
    monkeypatch.delenv("METAFUSE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert kernel_cache.directory() == "/xdg/metafuse/kernels"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", "/home/u")
    assert kernel_cache.directory() == "/home/u/.cache/metafuse/kernels"
