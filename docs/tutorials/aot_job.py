"""Loads the job artifact that docs/tutorials/aot_cli.sh compiled and runs
it: no tracing, no compiling, the program and its data come from the file.
With the key it was signed with, its own native code runs (docs/aot.md,
"Trust").

    python docs/tutorials/aot_job.py maml_job.mfa [key.hex]
"""

import sys

from metafuse import aot

key = aot.read_key_file(sys.argv[2]) if len(sys.argv) > 2 else None
job = aot.load_job(sys.argv[1], key=key)     # every check of the artifact runs here
print("trusted:", job.program.trusted)
state, history = job.run(20)                 # 20 steps over the stored meta-batches
print(f"20 steps from Python: loss {history[0]['loss']:.4f} -> {history[-1]['loss']:.4f}")
print("state:", {name: tuple(t.shape) for name, t in state.items()})
