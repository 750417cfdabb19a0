"""The README's Python example runs as written and reaches the parameters."""

import os
import re

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_python_blocks_run():
    text = open(README).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    namespace = {}
    exec(compile("\n".join(blocks), "README.md", "exec"), namespace)
    assert all(p.grad is not None for p in namespace["net"].parameters())
