"""Renders the results page's tables and figures from the current benchmark
JSON files in docs/results/ (the one command that regenerates them):

    .venv/bin/python tools/render_results.py           # writes docs/results/*.md and *.svg
    .venv/bin/python tools/render_results.py --check   # fails if the .md files are not up to date

The inputs are what `bench/sweep.py --json`, `bench/vmap_chunks.py --json`
and `bench/op_coverage.py --json` wrote (SWEEPS below names each sweep file and
the command that produced it). To update the page after a new run, replace
the JSON file in docs/results/ (a new one goes into SWEEPS) and run this
script; docs/results.md includes headline.md, tables.md and the figures.

Figures (matplotlib, SVG):
  speedup.svg  median meta-step time of eager metafuse / each variant, per
               model, inner optimizer and thread count (log scale);
  memory.svg   peak tensor memory of a meta-step per variant (1 thread);
  compile.svg  first-call time (compilation included) per variant.
"""

import argparse
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "results")
sys.path.insert(0, os.path.join(REPO, "bench"))

# (file, what it is). The sweep files are bench/sweep.py's; their "command"
# field says how each was run.
SWEEPS = [
    ("sweep_sinusoid.json", "sinusoid MLP, inner SGD and Adam, every variant, 1 thread"),
    ("sweep_conv.json", "conv net, inner SGD, every variant that runs on it, 1 thread; "
                        "measured while a build used the other core"),
    ("sweep_conv_1thread.json", "conv net, inner SGD, metafuse's variants, 1 thread, quiet machine"),
    ("sweep_conv_2threads.json", "conv net, inner SGD, metafuse's variants, 2 threads, quiet machine"),
]
# Thread counts of a file left out of the tables and figures, with the reason.
LEFT_OUT = {("sweep_sinusoid.json", "2"): "measured while a build used both cores (eager "
                                          "Adam 5x slower than at 1 thread): no ratio holds"}
CHUNKS = "vmap_chunks.json"
COVERAGE = "op_coverage.json"
# The variants the figures show, in this order, and their colours.
FIGURE_VARIANTS = ["plain PyTorch", "TorchOpt 0.7.3", "higher 0.2.1", "torch.func vmap",
                   "torch.compile func", "compiled per task", "compiled batched"]
ALL_VARIANTS = ["eager metafuse"] + FIGURE_VARIANTS  # eager: 1x in the speedup figure


def load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)


def kept(name, result):
    """The result with the LEFT_OUT thread counts removed."""
    cells = {key: {t: c for t, c in by_threads.items() if (name, t) not in LEFT_OUT}
             for key, by_threads in result["cells"].items()}
    return dict(result, cells=cells)


def command(result, name):
    """The run's command line, with the file it wrote as it is named here."""
    return re.sub(r"--json \S+", "--json docs/results/" + name, result["command"])


def sweep_tables(sweep):
    out = []
    for name, what in SWEEPS:
        result = load(name)
        out += [f"### {what}", "",
                f"`{name}`: torch {result.get('torch', '?')}, "
                f"{result['repeats']} timed meta-steps per cell (median), "
                f"`{command(result, name)}`", ""]
        for (file, threads), reason in LEFT_OUT.items():
            if file == name:
                out += [f"Left out: its {threads}-thread rows, {reason}.", ""]
        out += [sweep.table(kept(name, result)), ""]
    return out


def chunk_table():
    data = load(CHUNKS)
    eager = data["eager metafuse"]
    out = ["| variant | median ms | speed vs eager | peak tensor MiB | memory vs eager |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for variant, c in data.items():
        out.append(f"| {variant} | {c['median_ms']:.2f} | "
                   f"{eager['median_ms'] / c['median_ms']:.1f}x | {c['peak_tensor_mib']:.3f} | "
                   f"{c['peak_tensor_mib'] / eager['peak_tensor_mib']:.2f}x |")
    return out


def coverage_lines():
    data = load(COVERAGE)
    compiled = [d["idiom"] for d in data if d["compiled"]]
    eager = [d for d in data if not d["compiled"]]
    out = [f"{len(compiled)} of {len(data)} idioms compile; the others run eagerly with a "
           "warning that names the op:", "",
           "| idiom | why it runs eagerly |", "| --- | --- |"]
    out += [f"| {d['idiom']} | {d['fallback'].split(' (')[0]} |" for d in eager]
    return out


def cell(name, key, threads, variant):
    return load(name)["cells"][key][threads].get(variant, {})


def ratio_of(name, key, threads, variant, base="eager metafuse"):
    a, b = cell(name, key, threads, base), cell(name, key, threads, variant)
    return a["median_ms"] / b["median_ms"]


def render_headline():
    """The results page's headline, every number read from the JSON files."""
    sin, conv = "sweep_sinusoid.json", "sweep_conv.json"
    quiet = {"1": "sweep_conv_1thread.json", "2": "sweep_conv_2threads.json"}
    first_s = max(cell(sin, f"sinusoid/{o}", "1", "compiled batched")["first_call_ms"]
                  for o in ("sgd", "adam")) / 1e3
    tc = {o: cell(sin, f"sinusoid/{o}", "1", "torch.compile func") for o in ("sgd", "adam")}
    mf = {o: cell(sin, f"sinusoid/{o}", "1", "compiled batched") for o in ("sgd", "adam")}
    tc_first = [tc[o]["first_call_ms"] / 1e3 for o in ("sgd", "adam")]
    refused = "refused" in cell(sin, "sinusoid/sgd", "1", "torch.compile plain")
    chunks = load(CHUNKS)
    eager, one = chunks["eager metafuse"], chunks["chunk_size=1"]
    compiled_diffs = [c["grad_max_rel_diff"] for name, _ in SWEEPS
                      for by_threads in kept(name, load(name))["cells"].values()
                      for cells in by_threads.values()
                      for variant, c in cells.items()
                      if variant.startswith("compiled") and "grad_max_rel_diff" in c]
    lines = [
        "- **Sinusoid MAML** (MLP 1-40-40-1, 25 tasks, 5 inner steps, 1 thread): "
        "`metafuse.vmap` (compiled batched) runs the meta-step "
        f"**{ratio_of(sin, 'sinusoid/sgd', '1', 'compiled batched'):.0f}x faster than eager "
        f"with inner SGD and {ratio_of(sin, 'sinusoid/adam', '1', 'compiled batched'):.0f}x "
        "with inner Adam**; compiled per task "
        f"{ratio_of(sin, 'sinusoid/sgd', '1', 'compiled per task'):.1f}x and "
        f"{ratio_of(sin, 'sinusoid/adam', '1', 'compiled per task'):.1f}x. Its first call, "
        f"compilation included, takes at most {first_s:.1f} s.",
        "- **Against torch.compile**: "
        + ("`torch.compile` refuses the plain second-order meta-step (AOTAutograd has no "
           "double backward). " if refused else "")
        + f"Its `torch.func` form compiles in {min(tc_first):.0f} to {max(tc_first):.0f} s and "
        f"then runs the SGD meta-step in {tc['sgd']['median_ms']:.1f} ms against metafuse's "
        f"{mf['sgd']['median_ms']:.1f} ms (metafuse "
        f"{tc['sgd']['median_ms'] / mf['sgd']['median_ms']:.2f}x as fast); with inner Adam "
        f"{tc['adam']['median_ms']:.1f} ms against {mf['adam']['median_ms']:.1f} ms (metafuse "
        f"{tc['adam']['median_ms'] / mf['adam']['median_ms']:.1f}x as fast).",
        "- **Conv net (Omniglot MAML)**, inner SGD: compiled batched is "
        + " and ".join(f"{ratio_of(quiet[t], 'conv/sgd', t, 'compiled batched'):.1f}x eager "
                       f"at {t} thread{'s' if t != '1' else ''}" for t in ("1", "2"))
        + f"; TorchOpt 0.7.3 and higher 0.2.1 run at "
        f"{ratio_of(conv, 'conv/sgd', '1', 'TorchOpt 0.7.3'):.2f}x and "
        f"{ratio_of(conv, 'conv/sgd', '1', 'higher 0.2.1'):.2f}x of eager's speed.",
        "- **Memory**: `chunk_size=1` holds one task's saved values at a time: on the "
        f"sinusoid it peaks at {one['peak_tensor_mib'] / eager['peak_tensor_mib']:.2f}x eager's "
        f"tensor memory and runs {eager['median_ms'] / one['median_ms']:.1f}x faster than eager.",
        "- **Correctness**: every compiled meta-gradient is within "
        f"{max(compiled_diffs):.0e} (relative) of plain PyTorch's in float32; the \"grad vs "
        "float64\" columns compare both with a float64 computation.",
    ]
    return ("<!-- Written by tools/render_results.py from docs/results/*.json; do not edit. -->\n\n"
            + "\n".join(lines) + "\n")


def render_tables():
    import sweep  # bench/sweep.py: the table and notes the sweep itself prints
    lines = ["<!-- Written by tools/render_results.py from docs/results/*.json; "
             "do not edit. -->", "", "## The sweep tables", ""]
    lines += sweep_tables(sweep)
    lines += ["## `chunk_size`: time against memory", "",
              f"`{CHUNKS}`: the sinusoid meta-gradient (no outer step), 1 thread, "
              "`bench/vmap_chunks.py`.", ""]
    lines += chunk_table() + [""]
    lines += ["## What compiles", "", f"`{COVERAGE}`: `bench/op_coverage.py`.", ""]
    lines += coverage_lines()
    return "\n".join(lines) + "\n"


def figure_rows():
    """[(label, {variant: cell}, memory {variant: cell})] for every kept
    (file, model/optimizer, threads), the quiet conv runs preferred."""
    rows = {}
    for name, _ in SWEEPS:
        result = load(name)
        for key, by_threads in kept(name, result)["cells"].items():
            for threads, cells in by_threads.items():
                label = f"{key}\n{threads} thread{'s' if threads != '1' else ''}"
                merged = rows.setdefault(label, ({}, {}))
                for variant, c in cells.items():
                    # a later (quiet) file's cell replaces an earlier one
                    if c.get("median_ms") and "eager metafuse" in cells:
                        merged[0][variant] = dict(c, eager_ms=cells["eager metafuse"]["median_ms"])
                merged[1].update(result["memory"].get(key, {}))
    return rows


def render_figures(out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.hashsalt"] = "metafuse"
    rows = figure_rows()
    labels = list(rows)
    colours = plt.get_cmap("tab10")

    def bars(ax, value_of, rows_used, variants=FIGURE_VARIANTS):
        width = 0.8 / len(variants)
        for i, variant in enumerate(variants):
            xs, ys = [], []
            for x, label in enumerate(rows_used):
                v = value_of(rows[label], variant)
                if v:
                    xs.append(x + (i - len(variants) / 2 + 0.5) * width)
                    ys.append(v)
            if xs:
                ax.bar(xs, ys, width, label=variant, color=colours(ALL_VARIANTS.index(variant)))
        ax.set_xticks(range(len(rows_used)), rows_used, fontsize=8)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), metadata={"Date": None})
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4.5))
    bars(ax, lambda r, v: r[0][v]["eager_ms"] / r[0][v]["median_ms"] if v in r[0] else None,
         labels)
    ax.set_yscale("log")
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_ylabel("speedup over eager metafuse (x)")
    ax.set_title("Meta-step speedup over eager, per model and thread count")
    save(fig, "speedup.svg")

    with_memory = [label for label in labels if rows[label][1]]
    fig, ax = plt.subplots(figsize=(10, 4))
    bars(ax, lambda r, v: r[1].get(v, {}).get("peak_tensor_mib"), with_memory, ALL_VARIANTS)
    ax.set_yscale("log")
    ax.set_ylabel("peak tensor memory (MiB)")
    ax.set_title("Tensor memory of one meta-step, per variant (1 thread)")
    save(fig, "memory.svg")

    fig, ax = plt.subplots(figsize=(10, 4))
    bars(ax, lambda r, v: r[0][v].get("first_call_ms", 0) / 1e3 if v in r[0] else None, labels,
         ALL_VARIANTS)
    ax.set_yscale("log")
    ax.set_ylabel("first call (s), compilation included")
    ax.set_title("Compile latency: the first meta-step of each variant")
    save(fig, "compile.svg")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/results/tables.md differs from what the JSON gives")
    parser.add_argument("--out", default=RESULTS, help="where to write (default docs/results)")
    args = parser.parse_args()
    pages = {"tables.md": render_tables(), "headline.md": render_headline()}
    if args.check:
        stale = [name for name, text in pages.items()
                 if not os.path.exists(os.path.join(args.out, name))
                 or open(os.path.join(args.out, name)).read() != text]
        if stale:
            print(f"render_results: {', '.join(stale)} out of date: run tools/render_results.py")
            return 1
        print("render_results: tables.md and headline.md are up to date")
        return 0
    os.makedirs(args.out, exist_ok=True)
    for name, text in pages.items():
        with open(os.path.join(args.out, name), "w") as f:
            f.write(text)
    render_figures(args.out)
    print(f"render_results: wrote headline.md, tables.md, speedup.svg, memory.svg, compile.svg "
          f"in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
