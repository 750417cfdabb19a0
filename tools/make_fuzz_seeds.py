"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/) from real
metafuse output: an ahead-of-time artifact of two compiled functions, its
members (the serialized program, the shared object), the kernel IR of the
program's fused kernels, the kernel-cache entries the compilation stored,
and serialized TreeSpecs.

    .venv/bin/python tools/make_fuzz_seeds.py       # torch 2.x's pickler
    PYTHONPATH=frontend/python /usr/bin/python3 tools/make_fuzz_seeds.py  # 1.13's

Seeds are named by the SHA-1 of their content (libFuzzer's convention) and
added to tests/fuzz/corpus/<harness>/: the two torches' picklers write
programs differently, and the corpora keep both. Delete a folder to start
it over. Large members are left out: a seed over MAX_SEED bytes slows every
execution and bloats the repository.
"""

import collections
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
MAX_SEED = 256 * 1024
# A module-level class: a TreeSpec names a namedtuple by where it is defined.
Point = collections.namedtuple("Point", ["x", "y"])


def write_seeds(harness, blobs):
    folder = CORPUS / harness
    folder.mkdir(parents=True, exist_ok=True)
    kept = 0
    for blob in blobs:
        if isinstance(blob, str):
            blob = blob.encode()
        if len(blob) > MAX_SEED:
            continue
        (folder / hashlib.sha1(blob).hexdigest()).write_bytes(blob)
        kept += 1
    print(f"make_fuzz_seeds: {harness}: {kept} seeds")


def main():
    work = pathlib.Path(tempfile.mkdtemp(prefix="metafuse-seeds-"))
    # The kernel cache of this run only: its entries become the cache seeds.
    os.environ["XDG_CACHE_HOME"] = str(work / "cache")
    os.environ.pop("METAFUSE_KERNEL_CACHE_DIR", None)
    import torch
    import metafuse as mf
    from metafuse import aot

    f64 = torch.float64

    def quadratic_step(w, x):
        loss = ((w * x) ** 2).sum()
        return w - 0.1 * mf.grad(loss, w), {"loss": loss}

    def smooth_step(w, x):
        y = torch.tanh(w * x + 0.25)
        loss = (torch.exp(-y * y) + torch.where(y > 0, y, 0.5 * y)).sum()
        return w - 0.05 * mf.grad(loss, w)

    # An inner loop (MAML's shape: an MLP, Adam, a closed-over constant):
    # constants, GEMMs, reductions and the meta-backward in its program.
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    scale = torch.tensor(1.5)

    def task_loss(p, x, y):
        return torch.nn.functional.mse_loss(mf.functional_call(net, p, x) * scale, y)

    inner = mf.compile_inner_loop(task_loss, mf.adam(0.01), steps=2)
    xs = torch.rand(6, 2)

    w = torch.tensor([0.5, -1.0, 2.0], dtype=f64)
    x = torch.tensor([1.0, 2.0, -0.5], dtype=f64)
    artifacts, programs, shared_objects, kernel_irs = [], [], [], []
    for name, fn, args in [("quadratic", mf.compile(quadratic_step), (w, x)),
                           ("smooth", mf.compile(smooth_step), (w.float(), x.float())),
                           ("inner_loop", inner, (params, xs, xs.sum(1, keepdim=True)))]:
        path = work / f"{name}.mfa"
        aot.save(fn, str(path), *args)
        artifacts.append(path.read_bytes())
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                data = archive.read(member)
                if member == "program.bin":
                    programs.append(data)
        # The kernel IR the program keeps of each fused kernel (the text the
        # retargeting parser reads).
        texts, objects = program_parts(programs[-1])
        kernel_irs.extend(texts)
        shared_objects.extend(objects)
    # A small archive as the artifact writer makes it (stored members), of
    # the real manifest alone: keeps the archive harness's executions fast.
    small = work / "small.mfa"
    with zipfile.ZipFile(work / "quadratic.mfa") as src, \
            zipfile.ZipFile(small, "w", zipfile.ZIP_STORED) as dst:
        dst.writestr("manifest.json", src.read("manifest.json"))
    artifacts.append(small.read_bytes())

    write_seeds("artifact_archive", artifacts)
    write_seeds("program_serialization", programs)
    write_seeds("shared_object", shared_objects)
    write_seeds("kernel_ir_parser", kernel_irs)

    entries = sorted((work / "cache").rglob("*.kernel"), key=lambda p: p.stat().st_size)
    write_seeds("kernel_cache", [p.read_bytes() for p in entries[:6]])

    trees = [
        {"w": w, "b": [w, None, (w, w)]},
        [w, (w, {"a": w, "c": w}), None],
        collections.OrderedDict([("first", w), ("second", (w,))]),
        Point(w, [w, w]),
        ((w,), [[w]], {}),
        w,
    ]
    specs = [mf.tree.structure(t).serialize() for t in trees]
    specs.append(mf.tree.structure((None, w), none_is_leaf=True).serialize())
    write_seeds("tree_serialization", specs)
    shutil.rmtree(work)


def program_parts(program_bytes):
    """The kernel IR texts and the shared objects in a serialized program.
    The program is LibTorch's pickle of nested lists (program_serialization.cc
    writes every struct as the list of its fields): forward and backward are
    items 7 and 8 of the root; in each, item 6 lists the kernels (kernel IR:
    item 1) and item 11 is the shared object's bytes."""
    import io
    import torch
    # weights_only=False: the bytes were written by this script a moment ago
    # (the pickle names torch.jit._pickle.restore_type_tag).
    root = torch.load(io.BytesIO(program_bytes), weights_only=False)
    texts, objects = [], []
    for section in (root[7], root[8]):
        texts.extend(kernel[1] for kernel in section[6] if kernel[1])
        if section[11].numel():
            objects.append(section[11].numpy().tobytes())
    return texts, objects


if __name__ == "__main__":
    sys.exit(main())
