"""TorchOpt's ``torchopt.pytree``: optree-style tree functions and tree
arithmetic, over metafuse's C++ pytrees (metafuse.tree).

The optree names TorchOpt re-exports are here under the same names and
calling conventions (``tree_map(func, tree, *rests, is_leaf=None,
none_is_leaf=False, namespace='')``, ...); ``PyTreeSpec`` is
:class:`metafuse.tree.TreeSpec`. The arithmetic (``tree_add``,
``tree_sub_scalar_mul``, ``tree_vdot_real``, ...) uses metafuse.tree's C++
kernels where they exist. optree's structural helpers (one-level
flattening, transposition, common-structure broadcasting, prefix errors,
``Partial``, the legacy key paths) live in ``metafuse._pytree_structure``.
``tree_as_rref`` / ``tree_to_here`` use metafuse.distributed's RRef.
"""

import functools as _functools
import operator as _operator
import typing as _typing

import torch

from metafuse import tree as _tree
from metafuse._pytree_structure import (  # optree's structural helpers
    AttributeKeyPathEntry, GetitemKeyPathEntry, Partial, broadcast_common, is_namedtuple,
    is_namedtuple_class, prefix_errors, register_keypaths, treespec_entries,
    tree_broadcast_common, tree_broadcast_map, tree_broadcast_map_with_path,
    tree_flatten_one_level, tree_transpose)

_MISSING = object()

MAX_RECURSION_DEPTH = _tree.MAX_DEPTH
NONE_IS_NODE = False
NONE_IS_LEAF = True

PyTreeSpec = _tree.TreeSpec
PyTreeDef = _tree.TreeSpec
T = _typing.TypeVar("T")
S = _typing.TypeVar("S")


class PyTree(_typing.Generic[T]):
    """Type annotation for a tree with leaves of type T (``PyTree[Tensor]``)."""


def PyTreeTypeVar(name, param):  # noqa: N802 (optree's name)
    """A TypeVar bound to ``PyTree[param]``."""
    return _typing.TypeVar(name, bound=PyTree[param])


class PyTreeKind(__import__("enum").IntEnum):
    """The kinds of tree nodes (optree's enumeration)."""

    CUSTOM = 0
    LEAF = 1
    NONE = 2
    TUPLE = 3
    LIST = 4
    DICT = 5
    NAMEDTUPLE = 6
    ORDEREDDICT = 7
    DEFAULTDICT = 8
    DEQUE = 9
    STRUCTSEQUENCE = 10


FlattenFunc = _typing.Callable[[_typing.Any], tuple]
UnflattenFunc = _typing.Callable[[_typing.Any, _typing.Iterable], _typing.Any]


@_typing.runtime_checkable
class CustomTreeNode(_typing.Protocol[T]):
    """Protocol of classes that flatten themselves (register_pytree_node_class)."""

    def tree_flatten(self):
        """``(children, metadata[, entries])`` of this node."""
        ...

    @classmethod
    def tree_unflatten(cls, metadata, children):
        """The node rebuilt from ``metadata`` and ``children``."""
        ...


# -- optree's functions -------------------------------------------------------
def tree_flatten(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """``(leaves, treespec)``."""
    return _tree.flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_flatten_with_path(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """``(paths, leaves, treespec)``."""
    return _tree.flatten_with_path(tree, is_leaf, none_is_leaf=none_is_leaf,
                                   namespace=namespace)


def tree_unflatten(treespec, leaves):
    """The tree of structure ``treespec`` with ``leaves`` as its leaves
    (the inverse of tree_flatten)."""
    return _tree.unflatten(treespec, leaves)


def tree_leaves(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """The leaves of ``tree``, in flattening order."""
    return _tree.leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_structure(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """The TreeSpec of ``tree`` (its structure without the leaves)."""
    return _tree.structure(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_paths(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """The path (tuple of keys and indices) of every leaf."""
    return tree_flatten_with_path(tree, is_leaf, none_is_leaf=none_is_leaf,
                                  namespace=namespace)[0]


def tree_is_leaf(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """True when ``tree`` is itself a leaf."""
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    return len(leaves) == 1 and leaves[0] is tree


def all_leaves(iterable, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """True when every element of ``iterable`` is a leaf."""
    return _tree.all_leaves(iterable, is_leaf, none_is_leaf=none_is_leaf,
                            namespace=namespace)


def tree_map(func, tree, *rests, is_leaf=None, none_is_leaf=False, namespace=""):
    """``func(leaf, *other_leaves)`` at every leaf of ``tree`` (``rests``
    have its structure); a new tree."""
    return _tree.map(func, tree, *rests, is_leaf=is_leaf, none_is_leaf=none_is_leaf,
                     namespace=namespace)


def tree_map_(func, tree, *rests, is_leaf=None, none_is_leaf=False, namespace=""):
    """Like :func:`tree_map`, for the effect (``func`` may change leaves in
    place); returns ``tree``."""
    return _tree.map_(func, tree, *rests, is_leaf=is_leaf, none_is_leaf=none_is_leaf,
                      namespace=namespace)


def _with_paths(func, tree, rests, is_leaf, none_is_leaf, namespace):
    paths, leaves, spec = tree_flatten_with_path(tree, is_leaf, none_is_leaf=none_is_leaf,
                                                 namespace=namespace)
    others = [_tree.flatten_as(spec, r, is_leaf) for r in rests]
    return spec, [func(p, x, *xs) for p, x, *xs in zip(paths, leaves, *others)]


def tree_map_with_path(func, tree, *rests, is_leaf=None, none_is_leaf=False,
                       namespace=""):
    """``func(path, leaf, *other_leaves)`` at every leaf; a new tree."""
    spec, out = _with_paths(func, tree, rests, is_leaf, none_is_leaf, namespace)
    return _tree.unflatten(spec, out)


def tree_map_with_path_(func, tree, *rests, is_leaf=None, none_is_leaf=False,
                        namespace=""):
    """Like :func:`tree_map_with_path`, for the effect; returns ``tree``."""
    _with_paths(func, tree, rests, is_leaf, none_is_leaf, namespace)
    return tree


def tree_replace_nones(sentinel, tree, namespace=""):
    """``tree`` with every None replaced by ``sentinel``."""
    return _tree.map(lambda x: sentinel if x is None else x, tree,
                     none_is_leaf=True, namespace=namespace)


def tree_reduce(func, tree, initial=_MISSING, *, is_leaf=None, none_is_leaf=False,
                namespace=""):
    """``functools.reduce(func, leaves[, initial])`` over the leaves of ``tree``."""
    return _tree.reduce(func, tree, initial, is_leaf=is_leaf,
                        none_is_leaf=none_is_leaf, namespace=namespace)


def tree_sum(tree, start=0, *, is_leaf=None, none_is_leaf=False, namespace=""):
    """The sum of the leaves of ``tree``, starting from ``start``."""
    return sum(tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf,
                           namespace=namespace), start)


def _extremum(fn, tree, default, key, is_leaf, none_is_leaf, namespace):
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    kwargs = {} if default is _MISSING else {"default": default}
    return fn(leaves, key=key, **kwargs)


def tree_max(tree, *, default=_MISSING, key=None, is_leaf=None, none_is_leaf=False,
             namespace=""):
    """The largest leaf of ``tree`` (``max`` with ``default`` and ``key``)."""
    return _extremum(max, tree, default, key, is_leaf, none_is_leaf, namespace)


def tree_min(tree, *, default=_MISSING, key=None, is_leaf=None, none_is_leaf=False,
             namespace=""):
    """The smallest leaf of ``tree`` (``min`` with ``default`` and ``key``)."""
    return _extremum(min, tree, default, key, is_leaf, none_is_leaf, namespace)


def tree_all(tree, *, is_leaf=None, none_is_leaf=False, namespace=""):
    """True when every leaf of ``tree`` is true."""
    return all(tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


def tree_any(tree, *, is_leaf=None, none_is_leaf=False, namespace=""):
    """True when some leaf of ``tree`` is true."""
    return any(tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


def register_pytree_node(cls, flatten_func, unflatten_func, namespace=""):
    """``flatten_func(obj) -> (children, metadata[, entries])``,
    ``unflatten_func(metadata, children) -> obj``."""
    return _tree.register_node(cls, flatten_func, unflatten_func, namespace)


def register_pytree_node_class(cls=None, *, namespace=""):
    """Class decorator: ``cls.tree_flatten()`` and
    ``cls.tree_unflatten(metadata, children)`` make it a node."""
    if cls is None or isinstance(cls, str):
        ns = namespace if cls is None else cls
        return lambda c: register_pytree_node_class(c, namespace=ns)
    _tree.register_node(cls, _operator.methodcaller("tree_flatten"),
                        cls.tree_unflatten, namespace)
    return cls


# -- treespec helpers ---------------------------------------------------------
def treespec_leaf(*, none_is_leaf=False):
    """The TreeSpec of a single leaf."""
    return tree_structure(0, none_is_leaf=none_is_leaf)


def treespec_none(*, none_is_leaf=False):
    """The TreeSpec of ``None`` (a node without children unless ``none_is_leaf``)."""
    return tree_structure(None, none_is_leaf=none_is_leaf)


def treespec_tuple(treespecs=(), *, none_is_leaf=False):
    """The TreeSpec of a tuple whose children have the given TreeSpecs."""
    children = tuple(_tree.unflatten(s, [0] * s.num_leaves) for s in treespecs)
    return tree_structure(children, none_is_leaf=none_is_leaf)


def treespec_is_leaf(treespec, strict=True):
    """True when ``treespec`` is the TreeSpec of a single leaf."""
    return treespec.num_leaves == 1 and treespec == treespec_leaf()


def treespec_is_strict_leaf(treespec):
    """True when ``treespec`` is the TreeSpec of a single leaf."""
    return treespec_is_leaf(treespec)


def treespec_paths(treespec):
    """The path (tuple of keys and indices) of every leaf of ``treespec``."""
    return tree_paths(_tree.unflatten(treespec, [0] * treespec.num_leaves))


def treespec_children(treespec):
    """The TreeSpecs of the node's children."""
    return list(treespec.children())


def treespec_child(treespec, index):
    """The TreeSpec of the child number ``index``."""
    return treespec_children(treespec)[index]


def treespec_entry(treespec, index):
    """The key, field name or index of the child number ``index``."""
    return treespec_entries(treespec)[index]


def treespec_is_prefix(treespec, other_treespec, strict=False):
    """True when ``other_treespec`` is ``treespec`` with some leaves replaced
    by subtrees (``strict``: and not equal)."""
    def prefix(a, b):
        if a.is_leaf():
            return True
        if a.kind != b.kind or a.num_children != b.num_children or \
                treespec_entries(a) != treespec_entries(b):
            return False
        return all(prefix(x, y) for x, y in zip(a.children(), b.children()))
    return prefix(treespec, other_treespec) and not (strict and treespec == other_treespec)


def treespec_is_suffix(treespec, other_treespec, strict=False):
    """True when ``treespec`` is a suffix of ``other_treespec``
    (``other_treespec`` is a prefix of it)."""
    return treespec_is_prefix(other_treespec, treespec, strict=strict)


def broadcast_prefix(prefix_tree, full_tree, is_leaf=None, *, none_is_leaf=False,
                     namespace=""):
    """The leaves of ``prefix_tree``, each repeated for every leaf of the
    subtree of ``full_tree`` it covers (a list as long as full's leaves)."""
    leaves, prefix_spec = tree_flatten(prefix_tree, is_leaf, none_is_leaf=none_is_leaf,
                                       namespace=namespace)
    full_spec = tree_structure(full_tree, is_leaf, none_is_leaf=none_is_leaf,
                               namespace=namespace)
    if not treespec_is_prefix(prefix_spec, full_spec):
        raise ValueError(f"broadcast_prefix: {prefix_spec} is not a prefix of {full_spec}")
    counts = []

    def count(a, b):
        if a.is_leaf():
            counts.append(b.num_leaves)
        else:
            for x, y in zip(a.children(), b.children()):
                count(x, y)
    count(prefix_spec, full_spec)
    return [leaf for leaf, n in zip(leaves, counts) for _ in range(n)]


def tree_broadcast_prefix(prefix_tree, full_tree, is_leaf=None, *, none_is_leaf=False,
                          namespace=""):
    """``full_tree``'s structure with each leaf replaced by the prefix leaf
    covering it."""
    spec = tree_structure(full_tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    return _tree.unflatten(spec, broadcast_prefix(prefix_tree, full_tree, is_leaf,
                                                  none_is_leaf=none_is_leaf,
                                                  namespace=namespace))


# -- namedtuple / structseq ----------------------------------------------------
def namedtuple_fields(obj):
    """The field names of a namedtuple (instance or class); TypeError for anything else."""
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_namedtuple_class(cls):
        raise TypeError(f"namedtuple_fields: expected a namedtuple, got {cls.__name__}")
    return cls._fields


def is_structseq_class(cls):
    """True when ``cls`` is a structseq class (``torch.return_types``, ``os.stat_result``)."""
    return (isinstance(cls, type) and issubclass(cls, tuple)
            and isinstance(getattr(cls, "n_sequence_fields", None), int))


def is_structseq(obj):
    """True when ``obj`` is a structseq or a structseq class."""
    return is_structseq_class(obj if isinstance(obj, type) else type(obj))


def structseq_fields(obj):
    """The field names of a structseq (instance or class); TypeError for anything else."""
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_structseq_class(cls):
        raise TypeError(f"structseq_fields: expected a structseq, got {cls.__name__}")
    return tuple(cls.__match_args__[:cls.n_sequence_fields]) \
        if hasattr(cls, "__match_args__") else tuple(
            name for name in dir(cls) if not name.startswith("_")
            and name not in ("count", "index", "n_fields", "n_sequence_fields",
                             "n_unnamed_fields"))[:cls.n_sequence_fields]


# -- TorchOpt's tree arithmetic ------------------------------------------------
def tree_flatten_as_tuple(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """``(tuple(leaves), treespec)``."""
    leaves, spec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf,
                                namespace=namespace)
    return tuple(leaves), spec


def _elementwise(op, trees):
    if not trees:
        raise ValueError("expected at least one tree")
    leaves, spec = _tree.flatten(trees[0])
    others = [_tree.flatten_as(spec, t) for t in trees[1:]]
    return _tree.unflatten(spec, [_functools.reduce(op, xs)
                                  for xs in zip(leaves, *others)])


def acc_add(*args):
    return _functools.reduce(_operator.add, args)


def acc_mul(*args):
    return _functools.reduce(_operator.mul, args)


def acc_matmul(*args):
    return _functools.reduce(_operator.matmul, args)


def tree_pos(tree):
    """``+tree``."""
    return tree_map(_operator.pos, tree)


def tree_neg(tree):
    """``-tree``."""
    return tree_map(_operator.neg, tree)


def tree_add(*trees):
    """The leafwise sum of the trees (same structure)."""
    if len(trees) == 2:
        return _tree.add(trees[0], trees[1])
    return _elementwise(_operator.add, trees)


def tree_add_scalar_mul(tree_x, tree_y, alpha=None):
    """``tree_x + alpha * tree_y`` (alpha None: 1)."""
    return _tree.add(tree_x, tree_y, alpha)


def tree_sub(minuend_tree, subtrahend_tree):
    """The leafwise difference ``minuend_tree - subtrahend_tree``."""
    return _tree.sub(minuend_tree, subtrahend_tree)


def tree_sub_scalar_mul(tree_x, tree_y, alpha=None):
    """``tree_x - alpha * tree_y`` (alpha None: 1)."""
    return _tree.sub(tree_x, tree_y, alpha)


def tree_mul(*trees):
    """The leafwise product of the trees (same structure)."""
    return _elementwise(_operator.mul, trees)


def tree_matmul(*trees):
    """The leafwise matrix product of the trees (same structure)."""
    return _elementwise(_operator.matmul, trees)


def tree_scalar_mul(scalar, multiplicand_tree):
    """Every leaf of ``multiplicand_tree`` multiplied by ``scalar``."""
    return _tree.scalar_mul(scalar, multiplicand_tree)


def tree_truediv(dividend_tree, divisor_tree):
    """The leafwise quotient ``dividend_tree / divisor_tree``."""
    return _elementwise(_operator.truediv, (dividend_tree, divisor_tree))


def tree_vdot_real(tree_x, tree_y):
    """``sum(real(conj(x) . y))`` over the leaves, as a Python float."""
    leaves_x, spec = _tree.flatten(tree_x)
    leaves_y = _tree.flatten_as(spec, tree_y)
    total = 0.0
    for x, y in zip(leaves_x, leaves_y):
        x, y = x.contiguous().view(-1), y.contiguous().view(-1)
        total += torch.dot(x.real, y.real).item()
        if x.is_complex() and y.is_complex():
            total += torch.dot(x.imag, y.imag).item()
    return total


def tree_wait(future_tree):
    """Waits for every torch.futures.Future leaf; the tree of their values."""
    leaves, spec = _tree.flatten(future_tree)
    return _tree.unflatten(spec, torch.futures.wait_all(leaves))


def tree_as_rref(tree):
    """Each leaf wrapped in an RRef owned by this worker (metafuse's RRef,
    whose remote ``to_here`` keeps gradients flowing back; needs RPC)."""
    from metafuse.distributed.rref import RRef
    return tree_map(RRef, tree)


def tree_to_here(rref_tree, timeout=-1.0):
    """Each RRef leaf fetched here (``to_here(timeout)``; -1.0: the RPC
    default timeout)."""
    return tree_map(lambda r: r.to_here(timeout=timeout), rref_tree)


def tree_local_value(rref_tree):
    """Each RRef leaf's value on its owner (``local_value()``)."""
    return tree_map(lambda r: r.local_value(), rref_tree)


__all__ = [
    "MAX_RECURSION_DEPTH", "NONE_IS_NODE", "NONE_IS_LEAF", "tree_flatten",
    "tree_flatten_with_path", "tree_unflatten", "tree_leaves", "tree_structure",
    "tree_paths", "tree_is_leaf", "all_leaves", "tree_map", "tree_map_",
    "tree_map_with_path", "tree_map_with_path_", "tree_replace_nones",
    "tree_reduce", "tree_sum", "tree_max", "tree_min", "tree_all", "tree_any",
    "treespec_is_leaf", "treespec_is_strict_leaf", "treespec_leaf",
    "treespec_none", "treespec_tuple", "treespec_paths", "treespec_children",
    "treespec_child", "treespec_entries", "treespec_entry", "treespec_is_prefix",
    "treespec_is_suffix", "broadcast_prefix", "tree_broadcast_prefix",
    "register_pytree_node", "register_pytree_node_class", "PyTreeSpec",
    "PyTreeDef", "PyTreeKind", "PyTree", "PyTreeTypeVar", "CustomTreeNode", "FlattenFunc",
    "UnflattenFunc", "is_namedtuple", "is_namedtuple_class",
    "namedtuple_fields", "is_structseq", "is_structseq_class",
    "structseq_fields",
    "tree_flatten_as_tuple", "tree_pos", "tree_neg", "tree_add",
    "tree_add_scalar_mul", "tree_sub", "tree_sub_scalar_mul", "tree_mul",
    "tree_matmul", "tree_scalar_mul", "tree_truediv", "tree_vdot_real",
    "tree_wait",
    "tree_as_rref",
    "tree_to_here",
    "tree_flatten_one_level", "tree_transpose", "tree_broadcast_common",
    "broadcast_common", "tree_broadcast_map", "tree_broadcast_map_with_path",
    "prefix_errors", "Partial", "register_keypaths", "AttributeKeyPathEntry",
    "GetitemKeyPathEntry",
]
