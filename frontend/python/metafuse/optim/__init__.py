"""Object-oriented optimizers on top of the functional core.

- ``Optimizer`` subclasses (SGD, Adam, ...): drop-in torch.optim optimizers.
- ``MetaOptimizer`` subclasses (MetaSGD, MetaAdam, ...): differentiable
  updates of an nn.Module's parameters for meta-learning.
- ``FuncOptimizer``: ``step(loss, params) -> new params`` for functional
  models.
"""

from metafuse.optim.optimizer import (SGD, Adadelta, Adagrad, Adam, Adamax,
                                      AdamW, Optimizer, RAdam, RMSProp)
from metafuse.optim.meta import (MetaAdadelta, MetaAdagrad, MetaAdam,
                                 MetaAdamax, MetaAdamW, MetaOptimizer,
                                 MetaRAdam, MetaRMSProp, MetaSGD)
from metafuse.optim.func import FuncOptimizer

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad",
    "RAdam", "RMSProp", "MetaOptimizer", "MetaSGD", "MetaAdam", "MetaAdamW",
    "MetaAdamax", "MetaAdadelta", "MetaAdagrad", "MetaRAdam", "MetaRMSProp",
    "FuncOptimizer",
]
