"""metafuse demo (the README's main job, for now).

Tracks Adam's two moments for a 4M-parameter model with metafuse's fused
operator and with the equivalent eager PyTorch expression, checks that both
give the same numbers, and prints the median time of each and their ratio.
"""

import statistics
import time

import torch

import metafuse


def eager_moments(mu, nu, grad, b1, b2):
    return b1 * mu + (1 - b1) * grad, b2 * nu + (1 - b2) * grad * grad


def fused_moments(mu, nu, grad, b1, b2):
    return metafuse.ema_update(mu, grad, b1, 1), metafuse.ema_update(nu, grad, b2, 2)


def time_steps(fn, grads, repeats=7):
    samples = []
    for _ in range(repeats):
        mu = torch.zeros_like(grads[0])
        nu = torch.zeros_like(grads[0])
        start = time.perf_counter()
        for g in grads:
            mu, nu = fn(mu, nu, g, 0.9, 0.999)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), (mu, nu)


def main():
    torch.manual_seed(0)
    print("metafuse", metafuse.__version__, metafuse.build_info())
    print("cuda:", metafuse.cuda_status()[1])
    grads = [torch.randn(4_000_000) for _ in range(10)]
    t_eager, (mu_e, nu_e) = time_steps(eager_moments, grads)
    t_fused, (mu_f, nu_f) = time_steps(fused_moments, grads)
    torch.testing.assert_close(mu_f, mu_e)
    torch.testing.assert_close(nu_f, nu_e)
    print(f"Adam moments, 10 steps x 4M params, median of 7 runs, "
          f"{torch.get_num_threads()} threads")
    print(f"  eager torch : {t_eager * 1e3:8.2f} ms")
    print(f"  metafuse    : {t_fused * 1e3:8.2f} ms")
    print(f"  speedup     : {t_eager / t_fused:8.2f}x (same numbers: checked)")


if __name__ == "__main__":
    main()
