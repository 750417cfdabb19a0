"""Keeping nn.RNN / GRU / LSTM layers in step with parameters written
behind their back."""

__all__ = ["sync_flat_weights"]


def sync_flat_weights(modules):
    """nn.RNN / GRU / LSTM compute from their ``_flat_weights`` list, which
    only their ``__setattr__`` and ``_apply`` refresh: after parameters are
    written into ``_parameters`` directly (functional_call, a MetaOptimizer
    step, recover_state_dict), the list is rebuilt so the layer computes with
    the new tensors instead of silently with the old ones."""
    for owner in modules:
        names = owner.__dict__.get("_flat_weights_names")
        if names is not None:
            owner._flat_weights = [getattr(owner, name, None) for name in names]
