"""metafuse.tree: fast pytrees (flatten, unflatten, map, structure).

A pytree is a nest of containers whose non-container objects are leaves.
Nodes: tuple, list, dict (visited in sorted key order), OrderedDict and
defaultdict (insertion order, kept on unflatten), namedtuple, None (a node
with no children unless ``none_is_leaf=True``) and classes registered with
:func:`register_node`. ``torch.Tensor`` and every unregistered object are
leaves. ``is_leaf(obj) -> bool`` stops the descent where it returns True.

Everything here is implemented in C++ (``metafuse._C._tree``, sources in
``tree/``); this module only documents and checks arguments. See docs/tree.md.
"""

import functools as _functools

from metafuse._C import _tree as _C

TreeSpec = _C.TreeSpec
#: Trees deeper than this raise RecursionError (this is also how cycles are caught).
MAX_DEPTH = _C.MAX_DEPTH

_MISSING = object()


def _check(is_leaf, none_is_leaf, namespace):
    if is_leaf is not None and not callable(is_leaf):
        raise TypeError(f"is_leaf must be a callable or None, got {is_leaf!r}")
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
    return bool(none_is_leaf)


def _check_spec(spec, where):
    if not isinstance(spec, TreeSpec):
        raise TypeError(f"{where}: spec must be a metafuse.tree.TreeSpec, got "
                        f"{type(spec).__name__}")


def flatten(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """Returns ``(leaves, spec)``: the leaves in order and the tree's TreeSpec.

    Same-shaped trees are matched against a cached spec first, so repeated
    flattens skip key sorting and return the identical spec object.
    """
    return _C.flatten(tree, is_leaf, _check(is_leaf, none_is_leaf, namespace), namespace)


def flatten_with_path(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """Returns ``(paths, leaves, spec)``; a path is a tuple of the dict keys and
    sequence indices leading from the root to the leaf, e.g. ``('b', 1)``."""
    return _C.flatten_with_path(tree, is_leaf, _check(is_leaf, none_is_leaf, namespace),
                                namespace)


def unflatten(spec, leaves):
    """Rebuilds a tree of structure ``spec`` from an iterable of leaves."""
    _check_spec(spec, "unflatten")
    return _C.unflatten(spec, leaves)


def flatten_as(spec, tree, is_leaf=None):
    """The leaves of ``tree`` after checking that it has exactly ``spec``'s
    structure (ValueError naming the first differing path otherwise). No new
    spec is built: this is the fast path for trees of a known shape."""
    _check_spec(spec, "flatten_as")
    if is_leaf is not None:
        _check(is_leaf, False, "")
    return _C.flatten_as(spec, tree, is_leaf)


def leaves(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """The leaves of ``tree``, in flatten order."""
    return _C.leaves(tree, is_leaf, _check(is_leaf, none_is_leaf, namespace), namespace)


def structure(tree, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """The TreeSpec of ``tree``."""
    return _C.structure(tree, is_leaf, _check(is_leaf, none_is_leaf, namespace), namespace)


def map(func, tree, *rest, is_leaf=None, none_is_leaf=False, namespace=""):  # noqa: A001
    """``func(leaf, *other_leaves)`` at every leaf of ``tree``; a new tree of the
    same structure. Every tree in ``rest`` must have ``tree``'s structure
    (ValueError with the path and both sides otherwise)."""
    return _C.map(func, tree, rest, is_leaf, _check(is_leaf, none_is_leaf, namespace),
                  namespace)


def map_(func, tree, *rest, is_leaf=None, none_is_leaf=False, namespace=""):
    """Like :func:`map` but for the effect (e.g. in-place tensor updates):
    calls ``func`` at every leaf and returns ``tree`` itself."""
    return _C.map_(func, tree, rest, is_leaf, _check(is_leaf, none_is_leaf, namespace),
                   namespace)


def all_leaves(iterable, is_leaf=None, *, none_is_leaf=False, namespace=""):
    """True when every item of ``iterable`` is a leaf."""
    return _C.all_leaves(iterable, is_leaf, _check(is_leaf, none_is_leaf, namespace),
                         namespace)


def reduce(func, tree, initial=_MISSING, *, is_leaf=None, none_is_leaf=False,
           namespace=""):
    """``functools.reduce(func, leaves(tree)[, initial])``."""
    items = leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if initial is _MISSING:
        return _functools.reduce(func, items)
    return _functools.reduce(func, items, initial)


def register_node(cls, flatten_fn, unflatten_fn, namespace=""):
    """Makes instances of ``cls`` tree nodes.

    ``flatten_fn(obj)`` returns ``(children, context)`` or ``(children, context,
    entries)`` (entries: the path keys of the children); ``unflatten_fn(context,
    children)`` rebuilds the object from the context and a tuple of children.
    With a ``namespace`` the registration applies only to calls that pass the
    same namespace; ``namespace=""`` registers globally. Builtin node types and
    a second registration of the same class in the same namespace raise
    ValueError.
    """
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
    _C.register_node(cls, flatten_fn, unflatten_fn, namespace)
    return cls


def unregister_node(cls, namespace=""):
    """Undoes :func:`register_node` (ValueError when not registered)."""
    _C.unregister_node(cls, namespace)


def add(a, b, alpha=None, *, is_leaf=None, none_is_leaf=False, namespace=""):
    """``a + alpha * b`` leaf by leaf over matching trees of tensors; ``alpha``
    is a number or a tensor (differentiable), default 1."""
    return _C.add(a, b, alpha, is_leaf, _check(is_leaf, none_is_leaf, namespace), namespace)


def sub(a, b, alpha=None, *, is_leaf=None, none_is_leaf=False, namespace=""):
    """``a - alpha * b`` leaf by leaf over matching trees of tensors."""
    return _C.sub(a, b, alpha, is_leaf, _check(is_leaf, none_is_leaf, namespace), namespace)


def scalar_mul(scalar, tree, *, is_leaf=None, none_is_leaf=False, namespace=""):
    """``scalar * leaf`` for every tensor leaf; ``scalar`` a number or a tensor."""
    return _C.scalar_mul(scalar, tree, is_leaf, _check(is_leaf, none_is_leaf, namespace),
                         namespace)


def vdot(a, b, *, is_leaf=None, none_is_leaf=False, namespace=""):
    """``sum_i <a_i, b_i>`` over matching trees of tensors, a 0-dim tensor."""
    return _C.vdot(a, b, is_leaf, _check(is_leaf, none_is_leaf, namespace), namespace)


def spec_from_string(text):
    """The TreeSpec serialized by ``spec.serialize()`` (stable across processes;
    namedtuple and registered classes are found again by qualified name)."""
    if not isinstance(text, str):
        raise TypeError(f"spec_from_string: expected a str, got {type(text).__name__}")
    return TreeSpec.deserialize(text)


def cache_info():
    """Counters of the structure cache: hits, misses, size, enabled."""
    return _C.cache_info()


def clear_cache():
    """Empties the structure cache and resets its counters."""
    _C.clear_cache()


def set_cache_enabled(enabled):
    """Turns the structure cache on or off (on by default)."""
    _C.set_cache_enabled(bool(enabled))


__all__ = [
    "MAX_DEPTH", "TreeSpec", "add", "all_leaves", "cache_info", "clear_cache",
    "flatten", "flatten_as", "flatten_with_path", "leaves", "map", "map_", "reduce",
    "register_node", "scalar_mul", "set_cache_enabled", "spec_from_string",
    "structure", "sub", "unflatten", "unregister_node", "vdot",
]
