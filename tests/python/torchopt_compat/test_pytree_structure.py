"""optree's structural helpers re-exported by torchopt.pytree, against the
results optree documents for them."""

import pytest
import torch

import metafuse as torchopt

pt = torchopt.pytree


def test_tree_flatten_one_level_and_rebuild():
    tree = {"b": [1, 2], "a": 3}
    children, metadata, entries, unflatten = pt.tree_flatten_one_level(tree)
    assert children == [3, [1, 2]] and entries == ("a", "b")
    assert unflatten(metadata, [10, (5,)]) == {"a": 10, "b": (5,)}
    with pytest.raises(ValueError, match="leaf"):
        pt.tree_flatten_one_level(torch.zeros(2))


def test_tree_transpose():
    outer, inner = pt.tree_structure([0, 0]), pt.tree_structure((0, 0))
    assert pt.tree_transpose(outer, inner, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    with pytest.raises(ValueError, match="leaves"):
        pt.tree_transpose(outer, inner, [(1, 2), (3,)])


def test_broadcasting_to_the_common_structure():
    a, b = {"a": 1, "b": [2, 3]}, {"a": [4, 5], "b": 6}
    assert pt.tree_broadcast_common(a, b) == ({"a": [1, 1], "b": [2, 3]},
                                              {"a": [4, 5], "b": [6, 6]})
    assert pt.broadcast_common(a, b) == ([1, 1, 2, 3], [4, 5, 6, 6])
    assert pt.tree_broadcast_map(lambda x, y: x + y, a, b) == {"a": [5, 6], "b": [8, 9]}
    paths = pt.tree_broadcast_map_with_path(lambda p, x, y: p, {"a": 1}, {"a": [4, 5]})
    assert paths == {"a": [("a", 0), ("a", 1)]}
    with pytest.raises(ValueError, match="no common structure"):
        pt.tree_broadcast_common({"a": 1}, {"b": 1})


def test_prefix_errors():
    assert pt.prefix_errors({"a": 1}, {"a": [1, 2]}) == []
    errors = pt.prefix_errors({"a": [1, 2]}, {"a": (1, 2)})
    assert len(errors) == 1
    assert "in_axes['a']" in str(errors[0]("in_axes"))


def test_partial_is_a_pytree_node():
    p = pt.Partial(lambda x, y, z=0: x + y + z, torch.tensor(1.0), z=torch.tensor(2.0))
    assert len(pt.tree_leaves(p)) == 2
    scaled = pt.tree_map(lambda t: t * 10, p)
    assert isinstance(scaled, pt.Partial)
    assert scaled(torch.tensor(3.0)).item() == 33.0


def test_legacy_key_paths():
    assert pt.GetitemKeyPathEntry("a").pprint() == "['a']"
    assert pt.AttributeKeyPathEntry("w").pprint() == ".w"
    assert (pt.GetitemKeyPathEntry(0) + pt.AttributeKeyPathEntry("x")).pprint() == "[0].x"

    class Point:
        pass
    handler = lambda p: (pt.AttributeKeyPathEntry("x"),)
    assert pt.register_keypaths(Point, handler) is handler
    with pytest.raises(ValueError, match="already registered"):
        pt.register_keypaths(Point, handler)
