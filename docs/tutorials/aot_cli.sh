#!/usr/bin/env bash
# AOT jobs and the metafuse command: compile a whole meta-training step into
# one artifact, look inside it, run it without tracing or compiling again.
# Run from the repository root with the venv active (its bin/ holds `metafuse`):
#     bash docs/tutorials/aot_cli.sh [OUTPUT_DIR]
set -euo pipefail
out="${1:-.}"
steps="${STEPS:-200}"

# 0. A signing key (hex): the artifact's native code runs only where its key
#    is given; elsewhere its kernels are compiled from their kernel IR
#    (docs/aot.md, "Trust").
python -c "import secrets; print(secrets.token_hex(32))" > "$out/key.hex"

# 1. Compile: the script's meta_step with the data example_args() returns,
#    signed with the key.
metafuse compile examples/sinusoid_maml_job.py:meta_step -o "$out/maml_job.mfa" \
    --key-file "$out/key.hex"

# 2. Inspect: kind, versions, signature, shapes, instructions, kernels
#    (nothing runs).
metafuse inspect "$out/maml_job.mfa" --key-file "$out/key.hex"

# 3. Run: the stored meta-batches, cycled; metrics every 50 steps.
metafuse run "$out/maml_job.mfa" --steps "$steps" --every 50 --json "$out/history.json" \
    --key-file "$out/key.hex"

# 4. The same artifact from Python (or from C++ with metafuse/aot.h).
python docs/tutorials/aot_job.py "$out/maml_job.mfa" "$out/key.hex"
