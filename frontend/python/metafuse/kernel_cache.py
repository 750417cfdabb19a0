"""The on-disk kernel cache, seen from Python: where it is, what it holds,
whether each entry is intact, and clearing it (``metafuse cache``).

The runtime (``runtime/base/kernel_cache.cc``) writes one file per compiled
kernel, ``<128-bit hash of the key>.kernel``, laid out as

    "MFKC1\\n" | u64 len(key) | key | u64 len(object) | object | u64 FNV-1a of all before

(u64 little-endian; the key is the kernel's IR, its target and the versions
that shaped it, each as u64 length + bytes). This module reads that layout
and must change with it. The runtime itself never loads a bad entry (it
checks the same fields and removes it); ``verify`` reports them ahead of
time.
"""

import os

MAGIC = b"MFKC1\n"
SUFFIX = ".kernel"
_FNV_OFFSET = 1469598103934665603
_FNV_SECOND_SEED = 0x9e3779b97f4a7c15
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1

__all__ = ["directory", "Entry", "entries", "clear", "MAGIC", "SUFFIX"]


def directory():
    """The cache directory the runtime uses in this environment:
    ``$METAFUSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/metafuse/kernels`` (when
    absolute), else ``~/.cache/metafuse/kernels`` (runtime/base/options.cc)."""
    configured = os.environ.get("METAFUSE_CACHE_DIR", "")
    if configured:
        return configured.rstrip("/") or "/"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "metafuse", "kernels")
    return os.path.join(os.environ.get("HOME") or "/tmp", ".cache", "metafuse", "kernels")


def _fnv1a(data, seed=_FNV_OFFSET):
    h = seed
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def _u64(data, pos):
    if pos + 8 > len(data):
        raise ValueError("truncated")
    return int.from_bytes(data[pos:pos + 8], "little"), pos + 8


def _key_parts(key):
    """(ir, target, versions) from a serialized key."""
    parts, pos = [], 0
    for _ in range(3):
        size, pos = _u64(key, pos)
        if pos + size > len(key):
            raise ValueError("key truncated")
        parts.append(key[pos:pos + size].decode("utf-8", "replace"))
        pos += size
    if pos != len(key):
        raise ValueError("trailing bytes in the key")
    return parts


class Entry:
    """One cache file. ``kernel`` (the kernel's name when its IR names it),
    ``target``, ``versions``, ``size`` (bytes), ``mtime``; ``problem`` is
    None for an intact entry, else what is wrong with it (bad magic,
    truncated, checksum mismatch, name not the hash of its key, ...)."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        stat = os.stat(path)
        self.size, self.mtime = stat.st_size, stat.st_mtime
        self.kernel = self.target = self.versions = None
        self.problem = None
        try:
            with open(path, "rb") as f:
                self._decode(f.read())
        except (ValueError, OSError) as exc:
            self.problem = str(exc)

    def _decode(self, data):
        if not data.startswith(MAGIC):
            raise ValueError("not a kernel cache entry (bad magic)")
        key_len, pos = _u64(data, len(MAGIC))
        if pos + key_len > len(data):
            raise ValueError("truncated key")
        key = data[pos:pos + key_len]
        pos += key_len
        object_len, pos = _u64(data, pos)
        if pos + object_len > len(data):
            raise ValueError("truncated object")
        pos += object_len
        checksum, end = _u64(data, pos)
        if end != len(data):
            raise ValueError("trailing bytes after the checksum")
        ir, self.target, self.versions = _key_parts(key)
        first_line = ir.split("\n", 1)[0]
        if first_line.startswith("; metafuse kernel "):
            self.kernel = first_line[len("; metafuse kernel "):].strip()
        if checksum != _fnv1a(data[:pos]):
            raise ValueError("checksum mismatch (corrupted)")
        expected = f"{_fnv1a(key):016x}{_fnv1a(key, _FNV_SECOND_SEED):016x}{SUFFIX}"
        if self.name != expected:
            raise ValueError(f"file name is not the hash of its key (expected {expected})")


def entries(path=None):
    """The entries of the cache at ``path`` (default: ``directory()``),
    sorted by name; [] when the directory does not exist."""
    path = path or directory()
    if not os.path.isdir(path):
        return []
    return [Entry(os.path.join(path, name)) for name in sorted(os.listdir(path))
            if name.endswith(SUFFIX)]


def clear(path=None):
    """Removes every entry, and temporary files a killed writer left, from
    the cache at ``path`` (default: ``directory()``); other files stay.

    Returns:
        (number of files removed, bytes freed)."""
    path = path or directory()
    removed = freed = 0
    if not os.path.isdir(path):
        return removed, freed
    for name in os.listdir(path):
        if name.endswith(SUFFIX) or (SUFFIX + ".tmp.") in name:
            full = os.path.join(path, name)
            freed += os.path.getsize(full)
            os.unlink(full)
            removed += 1
    return removed, freed
