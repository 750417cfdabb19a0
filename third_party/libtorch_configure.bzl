"""Chooses the LibTorch that Bazel builds against: the one switch.

METAFUSE_LIBTORCH (a repository environment variable, set by
`--config=torch2` in .bazelrc or `--repo_env=METAFUSE_LIBTORCH=...`):
  unset or "system"   Debian 12's LibTorch 1.13.1 (libtorch-dev, python3-torch):
                      headers in /usr/include, libraries in the multiarch dir
  a directory         a LibTorch with include/ and lib/ (PyPI's torch package
                      directory, or an unpacked LibTorch archive), or a virtual
                      environment whose site-packages holds torch; a relative
                      path is taken from the workspace root (".venv")
The repository provides @libtorch (the C++ API) and @libtorch//:libtorch_python,
and defs.bzl with TORCH_VERSION and TORCH_SYSTEM.
"""

_SYSTEM_BUILD = """
package(default_visibility = ["//visibility:public"])

# Debian's LibTorch 1.13.1: ATen, c10 and torch/csrc are in /usr/include,
# which the compiler searches already; only the C++ API root needs adding.
cc_library(
    name = "libtorch",
    hdrs = glob(["include/torch/csrc/api/include/torch/**/*.h"]),
    includes = ["include/torch/csrc/api/include"],
    linkopts = ["-ltorch", "-ltorch_cpu", "-lc10", "-lpthread"],
)

# Python bindings of torch (Tensor <-> PyObject), for metafuse._C only.
cc_library(
    name = "libtorch_python",
    linkopts = ["-ltorch_python"],
    deps = [":libtorch"],
)
"""

_PACKAGE_BUILD = """
package(default_visibility = ["//visibility:public"])

# LibTorch {version} from {root}. Its include/ also carries the pybind11
# that this torch was built with; it comes before Debian's.
cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
        "-lpthread",
    ],
)

cc_library(
    name = "libtorch_python",
    linkopts = ["-L{lib}", "-ltorch_python"],
    deps = [":libtorch"],
)
"""

def _find_torch_root(ctx, setting):
    """The directory holding include/torch and lib/ for SETTING, or fails."""
    workspace = ctx.path(Label("@//:WORKSPACE")).dirname
    path = ctx.path(setting if setting.startswith("/") else "%s/%s" % (workspace, setting))
    candidates = [path]
    lib = path.get_child("lib")
    if lib.exists:
        for child in lib.readdir():
            if child.basename.startswith("python"):
                candidates.append(child.get_child("site-packages").get_child("torch"))
    for candidate in candidates:
        if (candidate.get_child("include").get_child("torch").exists and
            candidate.get_child("lib").get_child("libtorch.so").exists):
            return candidate
    fail(("METAFUSE_LIBTORCH=%s: no LibTorch there (expected include/torch and " +
          "lib/libtorch.so in it, or a virtual environment with torch in its " +
          "site-packages). Run tools/setup_venv.sh for the project venv, or unset " +
          "it for Debian's LibTorch 1.13.1.") % setting)

def _libtorch_configure_impl(ctx):
    setting = ctx.os.environ.get("METAFUSE_LIBTORCH", "system").strip()
    if setting in ("", "system"):
        ctx.symlink("/usr/include", "include")
        ctx.file("BUILD", _SYSTEM_BUILD)
        ctx.file("defs.bzl", 'TORCH_VERSION = "1.13.1"\nTORCH_SYSTEM = True\n')
        return
    root = _find_torch_root(ctx, setting)
    ctx.symlink(root.get_child("include"), "include")
    version = "unknown"
    version_py = root.get_child("version.py")  # PyPI's torch package
    if version_py.exists:
        for line in ctx.read(version_py).splitlines():
            if line.startswith("__version__"):
                version = line.split("'")[1] if "'" in line else line.split('"')[1]
    lib = str(root.get_child("lib"))
    ctx.file("BUILD", _PACKAGE_BUILD.format(version = version, root = str(root), lib = lib))
    ctx.file("defs.bzl", 'TORCH_VERSION = "%s"\nTORCH_SYSTEM = False\n' % version)

libtorch_configure = repository_rule(
    implementation = _libtorch_configure_impl,
    environ = ["METAFUSE_LIBTORCH"],
    local = True,
)
