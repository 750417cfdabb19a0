"""The implicit-differentiation examples train: their losses fall."""

import importlib.util
import os

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_imaml_meta_loss_falls():
    history = load("imaml_sinusoid").main(iterations=50, verbose=False)
    assert history[-1] < 0.97 * history[0], history


def test_hyperparameter_optimization_validation_loss_falls():
    history = load("hyperparameter_optimization").main(steps=15, verbose=False)
    assert history[-1] < 0.8 * history[0], history
