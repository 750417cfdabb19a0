// Google Benchmark: metafuse::ema_update (one fused pass) against the eager
// ATen expression it replaces (three kernels, two temporaries). Run with
//   bazel run //bench:ema_update_bench
// and read the ratio of the two rows at the same size.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "kernels/ema_update.h"

namespace {

void BM_EmaUpdateFused(benchmark::State& state) {
  auto m = torch::randn({state.range(0)});
  auto u = torch::randn({state.range(0)});
  for (auto _ : state) {
    benchmark::DoNotOptimize(metafuse::ema_update(m, u, 0.999, 2));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * 3 * 4);
}

void BM_EmaUpdateEager(benchmark::State& state) {
  auto m = torch::randn({state.range(0)});
  auto u = torch::randn({state.range(0)});
  for (auto _ : state) {
    benchmark::DoNotOptimize(m * 0.999 + u * u * (1 - 0.999));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * 3 * 4);
}

BENCHMARK(BM_EmaUpdateFused)->Arg(1 << 12)->Arg(1 << 20)->Arg(1 << 23);
BENCHMARK(BM_EmaUpdateEager)->Arg(1 << 12)->Arg(1 << 20)->Arg(1 << 23);

}  // namespace

BENCHMARK_MAIN();
