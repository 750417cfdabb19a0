"""TorchOpt's ``torchopt.accelerated_op``: whether the fused optimizer
operators can run on a device. metafuse's fused operators (kernels/,
``fused=True`` or ``use_accelerated_op=True``) are registered as
``torch.ops.metafuse.*`` for the CPU, and for CUDA where the build has it."""

import torch

__all__ = ["is_available"]


def is_available(devices=None):
    """True when the fused Adam operator runs on every device in
    ``devices`` (a device, a name, an index, or an iterable of them;
    default, as in TorchOpt: CUDA and the CPU, so False without a GPU).

    Args:
        devices: the devices to check (None: CUDA and the CPU).

    Returns:
        A bool.
    """
    from metafuse import alias

    if devices is None:
        devices = [torch.device("cuda"), torch.device("cpu")]
    elif isinstance(devices, (torch.device, str, int)):
        devices = [devices]
    try:
        for device in devices:
            device = torch.device(device)
            if device.type == "cuda" and not torch.cuda.is_available():
                return False
            p = torch.ones(2, device=device)
            tx = alias.adam(1e-3, fused=True)
            state = tx.init(p)
            tx.update(torch.ones(2, device=device), state, params=p, inplace=False)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False
