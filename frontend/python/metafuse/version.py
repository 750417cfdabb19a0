"""The package version (TorchOpt's ``torchopt.version``)."""

__version__ = "0.1.0"
