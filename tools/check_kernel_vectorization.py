#!/usr/bin/env python3
"""Shows whether the fused optimizer element loops are vectorized.

Disassembles bazel-bin/kernels/libkernels.so (build //kernels first) and
prints, for the AVX2 clone of every float/double ElementLoop (forward) and
BackwardLoop (fused first-order backward), how many
instructions touch 256-bit ymm registers and how many are packed arithmetic
(v{add,mul,div,sqrt,fmadd...}p{s,d} on ymm). A loop that did not vectorize
shows 0 packed arithmetic. Exit status 1 if any loop shows 0.

    bazel build //kernels && /usr/bin/python3 tools/check_kernel_vectorization.py
"""

import re
import subprocess
import sys

LIB = sys.argv[1] if len(sys.argv) > 1 else "bazel-bin/kernels/libkernels.so"
PACKED = re.compile(r"v(sqrt|div|fn?m(add|sub)[0-9]*|mul|add|sub|max|min)p[sd]\s+.*ymm")


def main():
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", LIB],
                         check=True, capture_output=True, text=True).stdout
    stats, cur = {}, None
    for line in dis.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            name = m.group(1)
            keep = (re.search(r"(Element|Backward)Loop<", name) and "x86_64_v3" in name
                    and "Half" not in name and "BFloat16" not in name)
            cur = name if keep else None
            if cur:
                stats[cur] = [0, 0, 0]
            continue
        if cur:
            # An identical-code-folded variant (kAux for an op without aux)
            # is a thunk that calls the real loop: not a loop of its own.
            if re.search(r"(call|jmp)\s.*<[^+]*(Element|Backward)Loop[^+]*>$", line):
                stats[cur][2] = -(10**9)
            stats[cur][2] += 1
            stats[cur][0] += "ymm" in line
            stats[cur][1] += bool(PACKED.search(line))
    bad = 0
    for name, (ymm, packed, total) in sorted(stats.items()):
        short = re.sub(r"metafuse::kernels::|\(anonymous namespace\)::", "", name)
        short = re.sub(r"\(.*", "", short)
        if total < 0:  # identical-code-folded thunk
            continue
        bad += packed == 0
        print(f"{ymm:4d} ymm {packed:4d} packed  {short}")
    print(f"{len(stats)} AVX2 loop clones, {bad} without packed arithmetic")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
