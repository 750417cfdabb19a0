"""``torch.distributed.rpc`` as TorchOpt programs reach it
(``torchopt.distributed.rpc``), with one change: ``RRef`` is metafuse's,
whose remote ``to_here()`` keeps gradients flowing to the owner
(metafuse.distributed.rref explains why). Every other name is torch's.
"""

import torch.distributed.rpc as _torch_rpc

# torch's public names; not `import *`: torch 2.11's __all__ names
# `backend_registered`, which the module does not define.
globals().update({name: getattr(_torch_rpc, name) for name in getattr(_torch_rpc, "__all__", ())
                  if hasattr(_torch_rpc, name)})

from metafuse.distributed.rref import RRef  # noqa: F401  (replaces torch's)


def __getattr__(name):
    return getattr(_torch_rpc, name)
