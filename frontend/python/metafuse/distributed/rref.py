"""An RRef whose ``to_here()`` keeps the value connected to the owner's
autograd graph, so that distributed autograd carries gradients back to it.

torch's RRef pickles the value for a remote fetch; an ``nn.Parameter`` is
pickled as its detached data. In TorchOpt's distributed MAML idiom the
caller passes ``rpc.RRef(net)`` and each task does
``module_clone(net_rref.to_here(), by='reference')``: the tasks on other
workers then train a detached copy, and the meta-gradient silently holds
the caller's own tasks only. This RRef fetches through an RPC that runs on
the owner and returns the value with its grad-requiring leaf tensors
replaced by differentiable clones (``module_clone(by='copy')`` for a
module), which distributed autograd records like any RPC: the remote
tasks' share of the gradient reaches the owner's parameters.
"""

import torch
import torch.distributed.rpc as _torch_rpc

from metafuse import tree as _tree
from metafuse.utils import module_clone

__all__ = ["RRef"]


def _connected_copy(value):
    """``value`` with every leaf tensor that requires grad replaced by a
    clone that stays in its graph (pickles with its gradient path)."""
    if isinstance(value, torch.nn.Module):
        return module_clone(value, by="copy")
    if isinstance(value, torch.Tensor):
        return value.clone() if value.requires_grad else value
    leaves, spec = _tree.flatten(value)
    if leaves and all(isinstance(x, torch.Tensor) for x in leaves):
        return _tree.unflatten(spec, [x.clone() if x.requires_grad else x for x in leaves])
    return value


def _owner_value(rref):
    """Runs on the owner: the connected copy of the local value."""
    return _connected_copy(rref.local_value())


class RRef:
    """A remote reference (torch.distributed.rpc.RRef's interface) whose
    remote fetch is differentiable.

    Args:
        value: the object to share (it stays on this worker).
        type_hint: as torch's RRef.
    """

    def __init__(self, value, type_hint=None):
        self._rref = _torch_rpc.RRef(value, type_hint)

    @classmethod
    def _wrap(cls, torch_rref):
        self = cls.__new__(cls)
        self._rref = torch_rref
        return self

    def to_here(self, timeout=_torch_rpc.api.UNSET_RPC_TIMEOUT):
        """The value, here. On the owner: the object itself. Elsewhere: a
        copy fetched by an RPC to the owner, connected to the owner's graph
        (inside a distributed-autograd context, gradients flow back).

        Args:
            timeout: seconds the fetch may take (default: the RPC timeout).

        Returns:
            The value.
        """
        if self._rref.is_owner():
            return self._rref.local_value()
        return _torch_rpc.rpc_sync(self._rref.owner(), _owner_value, args=(self._rref,),
                                   timeout=timeout)

    @property
    def torch_rref(self):
        """The underlying torch.distributed.rpc.RRef."""
        return self._rref

    def __getattr__(self, name):  # owner(), is_owner(), local_value(), rpc_sync(), ...
        if name == "_rref":
            raise AttributeError(name)
        return getattr(self._rref, name)

    def __reduce__(self):
        return (RRef._wrap, (self._rref,))

    def __repr__(self):
        return f"metafuse.distributed.rpc.RRef({self._rref!r})"
