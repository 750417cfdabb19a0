"""The BLAS behind torch must be safe when ATen calls it from two threads at
once: ATen's float64 convolution runs one GEMM per image inside
at::parallel_for. Debian's serial OpenBLAS (libopenblas0-serial) is not (it
shares work buffers between calls): on 2 threads its float64 conv2d came
out wrong in about 1 of 5 repeats, and every float64 reference of the
suite (compiled against eager, 1e-10) rests on these convolutions. The
project installs the OpenMP build instead (tools/install_deps.sh,
docs/building.md)."""

import torch


def _blas_libraries():
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f
                       if "blas" in line.rsplit("/", 1)[-1] and "/" in line})


def test_float64_convolutions_repeat_bit_for_bit_on_two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(75, 64, 14, 14, dtype=torch.float64, generator=g, requires_grad=True)
        w = torch.randn(64, 64, 3, 3, dtype=torch.float64, generator=g, requires_grad=True)

        def run():
            y = torch.nn.functional.conv2d(x, w, padding=1)
            return (y,) + torch.autograd.grad((y * y).sum(), (x, w))

        first = run()
        for repeat in range(25):
            again = run()
            assert all(torch.equal(a, b) for a, b in zip(first, again)), (
                f"float64 conv2d on 2 threads gave a different result on repeat {repeat}: "
                f"the BLAS ({', '.join(_blas_libraries()) or 'unknown'}) is not safe from two "
                "threads at once. Install libopenblas0-openmp (tools/install_deps.sh), or select "
                "its libblas.so.3, liblapack.so.3 and libopenblas.so.0 with update-alternatives")
    finally:
        torch.set_num_threads(threads)
