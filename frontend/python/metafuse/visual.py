"""Graph visualization (TorchOpt's ``torchopt.visual``), rendered with
graphviz.

- :func:`make_dot`: the autograd graph behind a tensor (or tree of tensors),
  with parameters named from a ``{name: tensor}`` dict, ``named_parameters()``
  or a :class:`metafuse.utils.ModuleState` made with
  ``extract_state_dict(..., enable_visual=True)``. A fused optimizer update
  (``fused=True`` / ``use_accelerated_op=True``) is one autograd node over
  all parameters and is drawn as one node, labelled with the optimizer.
- :func:`resize_graph`: scales the drawing with the number of nodes.
- :func:`make_program_dot` (metafuse only): the graph of a compiled program
  from :func:`metafuse.profile` results or a compiled function: its fused
  kernel groups as clusters, GEMMs, reductions and the buffers they reuse,
  forward and meta-backward.
"""

import re

import torch

from metafuse import tree as _tree
from metafuse.compile.compiled import kind_of

__all__ = ["make_dot", "resize_graph", "make_program_dot"]

_SAVED_PREFIX = "_saved_"
_FUSED = re.compile(r"metafuse|Fused", re.IGNORECASE)


def _graphviz():
    try:
        import graphviz
    except ImportError as exc:  # pragma: no cover - installed by tools/install_deps.sh
        raise ImportError("metafuse.visual needs the graphviz Python package and the "
                          "dot program (Debian: python3-graphviz graphviz; "
                          "tools/install_deps.sh installs them)") from exc
    return graphviz


def _size(t):
    return "(" + ", ".join(str(s) for s in t.size()) + ")"


def _node_name(fn):
    """The display name of an autograd node; fused metafuse updates say so."""
    name = type(fn).__name__
    full = fn.name() if hasattr(fn, "name") else name
    if _FUSED.search(full):
        match = re.search(r"Fused\w*<[^>]*?(\w+)>|Fused(\w+)", full)
        kind = next((g for g in (match.groups() if match else ()) if g), "")
        return f"fused {kind} update (metafuse)".replace("  ", " ")
    return name


def _attributes(fn, max_attr_chars):
    attrs = {}
    for attr in dir(fn):
        if not attr.startswith(_SAVED_PREFIX):
            continue
        value = getattr(fn, attr)
        key = attr[len(_SAVED_PREFIX):]
        if isinstance(value, torch.Tensor):
            attrs[key] = "[saved tensor]"
        elif isinstance(value, tuple) and any(isinstance(v, torch.Tensor) for v in value):
            attrs[key] = "[saved tensors]"
        else:
            text = str(value)
            limit = max(max_attr_chars, 3)
            attrs[key] = text if len(text) <= limit else text[:limit - 3] + "..."
    return attrs


def _names(params):
    """id(tensor) -> name and grad_fn -> name from the accepted forms."""
    by_tensor, by_fn = {}, {}
    if params is None:
        return by_tensor, by_fn
    from metafuse.utils import ModuleState

    def add(source):
        if isinstance(source, ModuleState):
            if source.visual_contents is None:
                raise ValueError("make_dot: a ModuleState names parameters only when "
                                 "made with extract_state_dict(..., enable_visual=True)")
            for key, value in source.visual_contents.items():
                if isinstance(value, tuple):  # grad_fn -> (name, tensor)
                    by_fn[key] = value[0]
                    by_tensor[id(value[1])] = value[0]
                else:  # tensor -> name
                    by_tensor[id(key)] = value
            return
        items = source.items() if isinstance(source, dict) else source
        for item in items:
            try:
                name, tensor = item
                if isinstance(name, torch.Tensor) and isinstance(tensor, str):
                    name, tensor = tensor, name  # {tensor: name} (TorchOpt's example)
            except (TypeError, ValueError):
                raise TypeError("make_dot: `params` must be a dict name -> tensor, "
                                "an iterable of (name, tensor) pairs (named_parameters()), "
                                "a ModuleState, or a list of these") from None
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"make_dot: parameter {name!r} is a "
                                f"{type(tensor).__name__}, not a tensor")
            by_tensor[id(tensor)] = str(name)
            if tensor.grad_fn is not None:
                by_fn[tensor.grad_fn] = str(name)

    if isinstance(params, (dict, ModuleState)):
        add(params)
    else:
        params = list(params)
        if params and all(isinstance(p, (dict, ModuleState)) for p in params):
            for p in params:
                add(p)
        else:
            add(params)
    return by_tensor, by_fn


def make_dot(var, params=None, show_attrs=False, show_saved=False, max_attr_chars=50):
    """The autograd graph that produced ``var`` (a tensor or a tree of
    tensors) as a ``graphviz.Digraph``.

    Blue boxes are leaf tensors (named when ``params`` names them), grey
    boxes operations, a node produced inside an inner loop for a named
    parameter carries its name, orange boxes saved tensors (``show_saved``),
    green the outputs. ``show_attrs`` lists each operation's saved
    non-tensor attributes (each cut to ``max_attr_chars``). Render with
    ``.render(...)`` or ``.pipe(format="svg")``.
    """
    graphviz = _graphviz()
    by_tensor, by_fn = _names(params)
    outputs = [t for t in _tree.leaves(var) if isinstance(t, torch.Tensor)]
    if not outputs:
        raise TypeError("make_dot: `var` must be a tensor or a tree of tensors")
    node_attr = dict(style="filled", shape="box", align="left", fontsize="10",
                     ranksep="0.1", height="0.2", fontname="monospace")
    dot = graphviz.Digraph(node_attr=node_attr, graph_attr=dict(size="12,12"))
    seen = set()
    # Python wrappers of autograd nodes live only while referenced: keep them
    # so that id() names each node once (no duplicates, no reuse).
    keep = []

    def tensor_label(t, name=None):
        return f"{name}\n{_size(t)}" if name else _size(t)

    def add_tensor(t, color, name=None):
        keep.append(t)
        key = str(id(t))
        if key not in seen:
            seen.add(key)
            dot.node(key, tensor_label(t, name or by_tensor.get(id(t))), fillcolor=color)
        return key

    def add_fn(fn):
        keep.append(fn)
        key = str(id(fn))
        if key in seen:
            return key
        seen.add(key)
        variable = getattr(fn, "variable", None)
        if isinstance(variable, torch.Tensor):  # AccumulateGrad: a leaf
            name = by_tensor.get(id(variable))
            dot.node(key, tensor_label(variable, name), fillcolor="lightblue")
            return key
        label = _node_name(fn)
        named = by_fn.get(fn)
        if named is not None:
            label = f"{named}\n{label}"
        if show_attrs:
            attrs = _attributes(fn, max_attr_chars)
            if attrs:
                width = max(len(k) for k in attrs)
                label += "\n" + "-" * max(len(label.splitlines()[-1]), 10) + "\n" + \
                    "\n".join(f"{k.ljust(width)}: {v}" for k, v in attrs.items())
        fused = label.startswith("fused ") or "\nfused " in label
        dot.node(key, label, fillcolor="gold" if fused else ("lightyellow" if named
                                                                else "lightgrey"))
        if show_saved:
            for attr in dir(fn):
                if not attr.startswith(_SAVED_PREFIX):
                    continue
                value = getattr(fn, attr)
                values = value if isinstance(value, tuple) else (value,)
                for i, saved in enumerate(values):
                    if isinstance(saved, torch.Tensor):
                        skey = f"{key}_{attr}_{i}"
                        if skey not in seen:
                            seen.add(skey)
                            dot.node(skey, f"{attr[len(_SAVED_PREFIX):]}\n{_size(saved)}",
                                     fillcolor="orange")
                        dot.edge(skey, key, dir="none")
        for next_fn, _ in getattr(fn, "next_functions", ()):
            if next_fn is not None:
                dot.edge(add_fn(next_fn), key)
        return key

    for out in outputs:
        if out.grad_fn is None:
            add_tensor(out, "darkolivegreen1")
            continue
        key = add_tensor(out, "darkolivegreen1")
        dot.edge(add_fn(out.grad_fn), key)
        base = out._base if out._is_view() else None
        if base is not None:
            dot.edge(add_tensor(base, "darkolivegreen3"), key, style="dotted")
    resize_graph(dot)
    return dot


def resize_graph(dot, size_per_element=0.5, min_size=12.0):
    """Sets the drawing size to fit the number of statements of ``dot``:
    ``max(min_size, size_per_element * len(dot.body))`` inches square."""
    if size_per_element <= 0 or min_size <= 0:
        raise ValueError("resize_graph: `size_per_element` and `min_size` must be > 0, "
                         f"got {size_per_element} and {min_size}")
    size = max(float(min_size), len(dot.body) * float(size_per_element))
    dot.graph_attr.update(size=f"{size},{size}")
    return dot


# -- compiled programs ----------------------------------------------------------
_INSTRUCTION = re.compile(r"^(\d+): ([^\s(\[]+)(\[x\d+\])?\((.*?)\) -> (.*)$")
_GROUP_LINE = re.compile(r"= metafuse::(FusionGroup_\d+)\[(.*?)\]\(")
_GROUP_BODY = re.compile(r"^with metafuse::(FusionGroup_\d+) = graph")
_OP = re.compile(r"= ((?:aten|prim|metafuse)::\w+)")


def _fusion_groups(ir_text):
    """[(ops inside, reuse list)] of the fusion groups of a *_fused stage's
    IR, in graph order: the order of the fused-kernel instructions of the
    program lowered from it (one instruction per top-level node)."""
    order, reuse, by_group = [], {}, {}
    current = None
    for line in ir_text.splitlines():
        header = _GROUP_BODY.match(line)
        if header:
            current = header.group(1)
            by_group[current] = []
            continue
        if current is None:
            match = _GROUP_LINE.search(line)
            if match:
                used = re.search(r"reuse=\[([^\]]*)\]", match.group(2))
                order.append(match.group(1))
                reuse[match.group(1)] = ([int(v) for v in used.group(1).split(",")
                                          if v.strip()] if used else [])
            continue
        op = _OP.search(line)
        if op and not op.group(1).startswith("prim::"):
            by_group[current].append(op.group(1))
    return [(by_group.get(g, []), reuse[g]) for g in order]


def _instructions(listing):
    out = []
    for line in listing.splitlines():
        match = _INSTRUCTION.match(line.strip())
        if match:
            index, op, batch, args, results = match.groups()
            out.append((int(index), op + (batch or ""), op,
                        [a.strip() for a in args.split(",") if a.strip()],
                        [r.strip() for r in results.split(",") if r.strip()]))
    return out


def make_program_dot(compiled, profile=None, program=0):
    """The graph of a compiled program (from :func:`metafuse.compile_inner_loop`
    or :func:`metafuse.compile`), as a ``graphviz.Digraph``: the forward and
    the meta-backward, each a cluster of the instructions the runtime executes
    (fused kernels in gold, each a cluster listing the operations it fused;
    GEMMs in blue; other ATen calls in grey), data-flow edges between them, and
    a dashed "reuses" edge where a fused kernel writes its output into an
    input's buffer. With ``profile`` (the :class:`metafuse.compile.profile.ProfileResult`
    of the same function) each instruction shows its measured time.
    ``program`` picks the compiled guard (one per input signature)."""
    graphviz = _graphviz()
    programs = compiled.programs() if kind_of(compiled) is not None else []
    if not programs:
        raise ValueError("make_program_dot: `compiled` must be a compiled function "
                         "(compile_inner_loop or compile) that has run at least once "
                         "without falling back to eager execution")
    if not 0 <= program < len(programs):
        raise ValueError(f"make_program_dot: `program` must be in [0, {len(programs)}), "
                         f"got {program}")
    prog = programs[program]
    fused = prog.fusion()
    listings = prog.fused_listing() if fused else prog.listing()
    stages = dict(prog.stages())
    times = {"forward": {}, "backward": {}}
    if profile is not None:
        import json
        for event in json.loads(profile.chrome_trace)["traceEvents"]:
            phase = event.get("cat")
            if phase in times:
                index = event.get("args", {}).get("instruction")
                times[phase].setdefault(index, 0.0)
                times[phase][index] += float(event.get("dur", 0.0))
    dot = graphviz.Digraph(graph_attr=dict(rankdir="TB", compound="true"),
                           node_attr=dict(shape="box", style="filled", fontsize="10",
                                          fontname="monospace"))
    for phase, listing in zip(("forward", "backward"), listings):
        groups = iter(_fusion_groups(stages.get(f"{phase}_fused", "")) if fused else [])
        instructions = _instructions(listing)
        produced = {}
        with dot.subgraph(name=f"cluster_{phase}") as phase_graph:
            phase_graph.attr(label=f"{phase} ({len(instructions)} instructions)",
                             style="rounded", color="grey40")
            for index, label, op, args, results in instructions:
                key = f"{phase}_{index}"
                text = f"{index}: {label}"
                if index in times[phase]:
                    text += f"\n{times[phase][index]:.1f} us"
                if op.startswith("fused_"):
                    ops, reuse = next(groups, ([], []))
                    with phase_graph.subgraph(name=f"cluster_{key}") as cluster:
                        cluster.attr(label=f"fusion group {label}", style="filled",
                                     color="gold", fillcolor="lightyellow")
                        cluster.node(key, text, fillcolor="gold")
                        if ops:
                            body = "\n".join(ops)
                            cluster.node(f"{key}_ops", body, shape="note",
                                         fillcolor="white", fontsize="8")
                            cluster.edge(f"{key}_ops", key, style="invis")
                    for out, source in zip(results, reuse):
                        if 0 <= source < len(args) and args[source] in produced:
                            phase_graph.edge(produced[args[source]], key, style="dashed",
                                             color="darkorange", label="reuses")
                else:
                    color = "lightblue" if op.startswith("gemm") else "lightgrey"
                    phase_graph.node(key, text, fillcolor=color)
                for arg in args:
                    if arg in produced:
                        phase_graph.edge(produced[arg], key)
                    else:
                        input_key = f"{phase}_in_{arg[1:]}"
                        phase_graph.node(input_key, f"input {arg}", shape="ellipse",
                                         fillcolor="darkolivegreen1")
                        phase_graph.edge(input_key, key)
                for out in results:
                    produced[out] = key
    return resize_graph(dot, size_per_element=0.15)
