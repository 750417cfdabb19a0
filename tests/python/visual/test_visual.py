"""metafuse.visual: autograd graphs (TorchOpt's make_dot / resize_graph) and
compiled-program graphs, rendered to SVG by the real graphviz."""

import re

import pytest
import torch

import metafuse as torchopt

graphviz = pytest.importorskip("graphviz")


def svg_of(dot):
    return dot.pipe(format="svg").decode()


def node_ids_with(dot, text):
    return [line.split()[0] for line in dot.body if "->" not in line and text in line]


def edges(dot):
    return {tuple(line.split()[:3:2]) for line in dot.body if "->" in line}


def inner_loop(use_accelerated_op):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    meta = torchopt.extract_state_dict(net, enable_visual=True, visual_prefix="meta.")
    opt = torchopt.MetaAdam(net, lr=0.1, use_accelerated_op=use_accelerated_op)
    x = torch.randn(8, 3)
    opt.step(net(x).pow(2).mean())
    adapted = torchopt.extract_state_dict(net, enable_visual=True, visual_prefix="step1.")
    return net(x).pow(2).mean(), meta, adapted


def test_make_dot_names_parameters_and_collapses_a_fused_update():
    loss, meta, adapted = inner_loop(use_accelerated_op=True)
    dot = torchopt.visual.make_dot(loss, params=[meta, adapted])
    svg = svg_of(dot)
    for name in ("meta.0.weight", "meta.2.bias", "step1.0.weight", "step1.2.bias"):
        assert name in svg
    # One fused Adam update over all four parameters: one node.
    fused = node_ids_with(dot, "fused Adam update")
    assert len(fused) == 1
    # Each adapted parameter (meta + update) is fed by the meta-parameter and
    # by the one fused node.
    e = edges(dot)
    adapted_w = node_ids_with(dot, "step1.0.weight")[0]
    meta_w = node_ids_with(dot, "meta.0.weight")[0]
    assert (meta_w, adapted_w) in e and (fused[0], adapted_w) in e
    assert svg.count("fused Adam update") == 1


def test_make_dot_unfused_update_is_a_chain_of_operations():
    loss, meta, adapted = inner_loop(use_accelerated_op=False)
    dot = torchopt.visual.make_dot(loss, params=[meta, adapted])
    assert not node_ids_with(dot, "fused")
    assert len(dot.body) > 60  # the chain's ATen operations, per parameter


def test_make_dot_params_forms_attrs_and_saved():
    w = torch.randn(3, requires_grad=True)
    y = (w.exp() * 2).sum()
    for params in ({"w": w}, {w: "w"}, [("w", w)], iter([("w", w)])):
        body = "".join(torchopt.visual.make_dot(y, params).body)
        assert 'label="w' in body and "lightblue" in body
    assert 'label="w' not in "".join(torchopt.visual.make_dot(y).body)
    plain = torchopt.visual.make_dot(y, {"w": w})
    detailed = torchopt.visual.make_dot(y, {"w": w}, show_attrs=True, show_saved=True)
    text = "".join(detailed.body)
    assert "result" in text and "[saved tensor]" in text and "orange" in text
    assert len(detailed.body) > len(plain.body)
    with pytest.raises(TypeError, match="`params`"):
        torchopt.visual.make_dot(y, [1, 2])
    with pytest.raises(ValueError, match="enable_visual=True"):
        torchopt.visual.make_dot(y, torchopt.extract_state_dict(torch.nn.Linear(1, 1)))


def test_resize_graph():
    dot = graphviz.Digraph()
    for i in range(100):
        dot.node(str(i))
    torchopt.visual.resize_graph(dot, size_per_element=0.5, min_size=12)
    assert dot.graph_attr["size"] == "50.0,50.0"
    small = torchopt.visual.resize_graph(graphviz.Digraph(), min_size=12)
    assert small.graph_attr["size"] == "12.0,12.0"
    with pytest.raises(ValueError, match="size_per_element"):
        torchopt.visual.resize_graph(dot, size_per_element=0)


def test_make_program_dot_shows_fusion_groups_gemms_reuse_and_times():
    torch.manual_seed(0)

    def loss_fn(params, x, y):
        w1, w2 = params
        return ((torch.tanh(x @ w1) @ w2 - y) ** 2).mean()

    params = (torch.randn(3, 8, requires_grad=True), torch.randn(8, 1, requires_grad=True))
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    adapt = torchopt.compile_inner_loop(loss_fn, torchopt.sgd(0.1), steps=1)
    result = torchopt.profile(adapt, params, x, y, quiet=True)
    dot = torchopt.visual.make_program_dot(adapt, result)
    svg = svg_of(dot)
    assert "forward (" in svg and "backward (" in svg
    report = adapt.programs()[0].fusion_report()
    program = adapt.programs()[0]
    fused_instructions = sum(line.split(": ", 1)[1].startswith("fused_")
                             for listing in program.fused_listing()
                             for line in listing.splitlines())
    clusters = [l for l in dot.body if 'label="fusion group' in l]
    assert fused_instructions > 0 and len(clusters) == fused_instructions
    gemms = [l for l in dot.body if "gemm_" in l and "->" not in l]
    assert len(gemms) == report["forward"]["gemms"] + report["backward"]["gemms"]
    assert any("reuses" in l for l in dot.body)
    assert re.search(r"\d+\.\d us", svg)
    assert "aten::tanh" in svg
    with pytest.raises(ValueError, match="compiled function"):
        torchopt.visual.make_program_dot(lambda: None)


def test_example_writes_pngs(tmp_path):
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                        "visualize_meta_gradient.py")
    spec = importlib.util.spec_from_file_location("visualize_meta_gradient", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for png in module.main(str(tmp_path)):
        with open(png, "rb") as f:
            header = f.read(8)
        assert header == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 10000
