"""The ES-MAML example trains: its validation meta-loss falls."""

import importlib.util
import os

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                       "es_maml_sinusoid.py")


def test_es_maml_meta_loss_falls():
    spec = importlib.util.spec_from_file_location("es_maml_sinusoid", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    history = module.main(iterations=76, verbose=False)
    assert history[-1] < 0.95 * history[0], history
