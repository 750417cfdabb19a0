"""Finds the CUDA toolkit (NVRTC headers and library, nvcc) if it is installed.

The repository always exists, so BUILD files can depend on it unconditionally:
  @local_cuda//:nvrtc            NVRTC (headers + -lnvrtc), empty without CUDA
  @local_cuda//:cudart           the CUDA runtime (static), for nvcc-built kernels
  @local_cuda//:defs.bzl         CUDA_AVAILABLE, CUDA_PATH, NVCC_AVAILABLE
Where the toolkit is missing the targets are empty and CUDA_AVAILABLE is False,
so CUDA code is left out of the build instead of failing it.
"""

def _cuda_configure_impl(ctx):
    cuda_path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    root = ctx.path(cuda_path)
    available = (root.get_child("include").get_child("nvrtc.h").exists and
                 root.get_child("lib64").get_child("libnvrtc.so").exists)
    nvcc = (available and root.get_child("bin").get_child("nvcc").exists and
            root.get_child("lib64").get_child("libcudart_static.a").exists)
    if available:
        ctx.symlink(root.get_child("include"), "include")
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "nvrtc",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
    linkopts = ["-L{lib}", "-lnvrtc", "-Wl,-rpath,{lib}"],
)

# The CUDA runtime, linked statically so binaries need no rpath to it; it
# reaches libcuda itself at run time and reports a missing driver as an error.
cc_library(
    name = "cudart",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
    linkopts = ["-L{lib}", "-lcudart_static", "-ldl", "-lrt", "-lpthread"],
)

# Headers for the CUDA driver API; libcuda itself is dlopen'ed at run time.
cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
)
""".format(lib = cuda_path + "/lib64"))
    else:
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(name = "nvrtc")

cc_library(name = "cudart")

cc_library(name = "cuda_headers")
""")
    ctx.file("defs.bzl", "CUDA_AVAILABLE = {}\nCUDA_PATH = \"{}\"\nNVCC_AVAILABLE = {}\n".format(
        available,
        cuda_path,
        nvcc,
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
