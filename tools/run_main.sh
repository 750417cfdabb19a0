#!/usr/bin/env bash
# README command 1: install (the project venv with PyPI's torch 2.x and the
# peers, tools/setup_venv.sh --peers), build metafuse into it, and run the main
# job on torch 2.x: MAML on sinusoid regression trained side by side by the
# eager path, torch.func and the compiled path (bench/maml_compiled.py):
# curves, time per meta-step and ratios, compile latency, tensor memory.
# Extra arguments go to the job (e.g. --iterations 30).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_venv.sh --peers
unset PYTHONPATH
.venv/bin/python bench/maml_compiled.py --iterations 100 "$@"
echo "run_main: metafuse is installed in $PWD/.venv; use it with: source .venv/bin/activate"
