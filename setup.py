"""The pip route: `pip install --no-build-isolation .` builds metafuse._C (what
Bazel builds as //frontend:_C.so) against the torch that is installed.

- Sources: tools/extension_sources.txt, the list Bazel's is checked against.
- LLVM 14 is optional: found through llvm-config-14 (or $LLVM_CONFIG) it is
  linked and METAFUSE_WITH_LLVM=1 is defined; without it, or with
  METAFUSE_WITH_LLVM=0 in the environment, runtime/jit/llvm_jit_unavailable.cc
  stands in and fused CPU kernels go through the C++ printer and the system
  compiler. METAFUSE_WITH_LLVM=1 makes a missing LLVM an error.
- CUDA sources (NVRTC, nvcc-built kernels) are built exactly when the
  installed torch has CUDA and a toolkit is found (METAFUSE_WITH_CUDA=0: never).
- MAX_JOBS limits the parallel compile jobs (torch.utils.cpp_extension).
See docs/building.md.
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import find_packages, setup

import torch
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import extension_sources  # noqa: E402  (tools/, beside its list)

TORCH_MAJOR = int(torch.__version__.split(".")[0])


def switch(name):
    """True/False for an environment switch set to 1/0, None when unset."""
    value = os.environ.get(name, "").strip()
    if value == "":
        return None
    if value not in ("0", "1"):
        sys.exit(f"setup.py: {name} must be 0 or 1, got {value!r}")
    return value == "1"


def find_llvm():
    """(include directory, path of the shared libLLVM-14) or None."""
    candidates = [os.environ.get("LLVM_CONFIG"), shutil.which("llvm-config-14"),
                  "/usr/lib/llvm-14/bin/llvm-config"]
    for tool in filter(None, candidates):
        if not os.access(tool, os.X_OK):
            continue
        query = lambda flag: subprocess.check_output([tool, flag], text=True).strip()
        if not query("--version").startswith("14."):
            continue
        library = os.path.join(query("--libdir"), "libLLVM-14.so")
        if os.path.exists(library):
            return query("--includedir"), os.path.realpath(library)
    return None


def absl_libraries():
    """The Abseil libraries the Bazel build links (third_party/absl.BUILD)."""
    with open(os.path.join(ROOT, "third_party", "absl.BUILD")) as f:
        return re.findall(r'"-l(absl_\w+)"', f.read())


def package_version():
    with open(os.path.join(ROOT, "frontend", "python", "metafuse", "version.py")) as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


def kernel_math_text(header_path):
    """compiler/codegen/kernel_math.h as a C++ raw string literal: what Bazel's
    genrule //compiler/codegen:kernel_math_text writes."""
    with open(header_path) as f:
        return 'R"mfsrc(\n' + f.read() + ')mfsrc"\n'


# Bazel's include_prefix: frontend/core/optim/BUILD publishes its headers as
# "metafuse/optim/...". Here a link in the build directory does the same.
# nvcc's targets where no GPU is visible to read them from (TORCH_CUDA_ARCH_LIST).
DEFAULT_CUDA_ARCHITECTURES = "8.0;9.0+PTX"

INCLUDE_PREFIXES = {"metafuse/optim": "frontend/core/optim"}


class BuildExtension(cpp_extension.BuildExtension):
    """Generates kernel_math_text.inc and the include-prefix links into the
    build directory first."""

    def build_extension(self, ext):
        generated = os.path.join(os.path.abspath(self.build_temp), "generated")
        for prefix, directory in INCLUDE_PREFIXES.items():
            link = os.path.join(generated, prefix)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            if os.path.islink(link):
                os.remove(link)
            os.symlink(os.path.join(ROOT, directory), link)
        target = os.path.join(generated, "compiler", "codegen", "kernel_math_text.inc")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        text = kernel_math_text(os.path.join(ROOT, "compiler", "codegen", "kernel_math.h"))
        if not os.path.exists(target) or open(target).read() != text:
            with open(target, "w") as f:
                f.write(text)
        ext.include_dirs.append(generated)
        super().build_extension(ext)


def extension():
    llvm_wanted = switch("METAFUSE_WITH_LLVM")
    llvm = find_llvm() if llvm_wanted is not False else None
    if llvm_wanted and llvm is None:
        sys.exit("setup.py: METAFUSE_WITH_LLVM=1 but no LLVM 14 was found "
                 "(llvm-config-14, /usr/lib/llvm-14 or $LLVM_CONFIG); "
                 "install llvm-14-dev or build with METAFUSE_WITH_LLVM=0")
    cuda = (switch("METAFUSE_WITH_CUDA") is not False and torch.version.cuda is not None
            and cpp_extension.CUDA_HOME is not None)
    sources = extension_sources.select(extension_sources.read(), llvm=llvm is not None,
                                       nvrtc=cuda, nvcc=cuda)
    print(f"setup.py: metafuse._C for torch {torch.__version__}: "
          f"LLVM {'on (' + llvm[1] + ')' if llvm else 'off'}, "
          f"CUDA {'on (' + cpp_extension.CUDA_HOME + ')' if cuda else 'off'}, "
          f"{len(sources)} sources")

    # Bazel's flags (.bazelrc, BUILD copts). -fno-math-errno (kernels/) and
    # -ffp-contract=off (the kernel IR interpreter) apply to every file here:
    # one flag set per extension; nothing else reads errno or relies on FMA.
    cxx = ["-O2", "-g0", "-fopenmp", "-fno-math-errno", "-ffp-contract=off",
           "-Wno-unused-parameter", "-Wno-sign-compare"]
    nvcc = ["-O3"]
    if TORCH_MAJOR < 2:  # torch 1.x defaults to C++14; 2.x picks its own (17, later 20)
        cxx.append("-std=c++17")
        nvcc.append("-std=c++17")
    macros = [("METAFUSE_WITH_LLVM", "1" if llvm else "0")]
    include_dirs = [ROOT]
    # -lstdc++ ahead of the driver's own: a compiler that links libstdc++
    # statically (the GPU machine's /opt/gcc g++ did) would otherwise give the
    # extension a second libstdc++ beside torch's, and formatting a number
    # into a stream then crashed in the locale facets (docs/building.md).
    link_args = ["-fopenmp", "-ldl", "-lcrypto", "-lstdc++"]
    if llvm:
        cxx += ["-isystem", llvm[0]]  # as Bazel does: LLVM's own warnings stay quiet
        macros += [("__STDC_CONSTANT_MACROS", None), ("__STDC_FORMAT_MACROS", None),
                   ("__STDC_LIMIT_MACROS", None)]
        # The library by path, never -L of LLVM's lib directory: that holds
        # libgomp.so -> libomp.so.5, which would bind -fopenmp to LLVM's
        # OpenMP beside ATen's libgomp (third_party/llvm.BUILD).
        link_args += [llvm[1], "-Wl,-rpath," + os.path.dirname(llvm[1])]
    kind = cpp_extension.CppExtension
    if cuda:
        kind = cpp_extension.CUDAExtension
        # NVRTC for compiled programs' fused kernels; the CUDA torch's own
        # headers for the fused optimizer ops' CUDA registration
        # (kernels/cuda/register_cuda.cc) and torch's current stream.
        macros += [("METAFUSE_HAS_NVRTC", None), ("METAFUSE_WITH_CUDA_TORCH", None)]
        cuda_lib = os.path.join(cpp_extension.CUDA_HOME, "lib64")
        # torch reads the architectures off the visible GPUs; on a machine
        # without one (this build host, CI) its list is empty and
        # cpp_extension fails. Ampere and Hopper, plus PTX for later GPUs.
        if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
            os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_CUDA_ARCHITECTURES
        link_args += ["-L" + cuda_lib, "-lnvrtc", "-Wl,-rpath," + cuda_lib]
    return kind(
        "metafuse._C", sources, include_dirs=include_dirs, define_macros=macros,
        libraries=absl_libraries(), extra_link_args=link_args,
        extra_compile_args={"cxx": cxx, "nvcc": nvcc} if cuda else cxx)


setup(
    name="metafuse",
    version=package_version(),
    description="Compiled differentiable optimization for PyTorch (meta-learning)",
    package_dir={"": "frontend/python"},
    packages=find_packages(where="frontend/python"),
    package_data={"metafuse": ["_C.pyi"]},
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension},
    entry_points={"console_scripts": ["metafuse = metafuse.cli:main"]},
    python_requires=">=3.8",
    zip_safe=False,
)
