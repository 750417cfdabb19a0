"""``torch.distributed.rpc`` as TorchOpt programs reach it
(``torchopt.distributed.rpc``), with one change: ``RRef`` is metafuse's,
whose remote ``to_here()`` keeps gradients flowing to the owner
(metafuse.distributed.rref explains why). Every other name is torch's.
"""

import torch.distributed.rpc as _torch_rpc
from torch.distributed.rpc import *  # noqa: F401,F403

from metafuse.distributed.rref import RRef  # noqa: F401  (replaces torch's)


def __getattr__(name):
    return getattr(_torch_rpc, name)
