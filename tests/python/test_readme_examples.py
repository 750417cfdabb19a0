"""The README's Python examples run as written."""

import os
import re

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_python_blocks_run():
    text = open(README).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    namespace = {}
    exec(compile("\n".join(blocks), "README.md", "exec"), namespace)
    assert namespace["new_params"]["w"].grad_fn is not None
    assert all(p.grad is not None for p in namespace["net"].parameters())
