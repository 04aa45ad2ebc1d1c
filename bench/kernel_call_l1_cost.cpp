// The compute cost of one generated kernel, called as the backend calls it, over an L1-resident
// slice on one thread (bench/kernel_l1_cost.cpp times a body expression instead, which a kernel
// with explicit SIMD, docs/codegen.md "Explicit SIMD", does not have). The kernel's source from
// DYNAMO_LOGS=output_code, its size 8M (chain6) replaced by 8192 so that input and output stay in
// L1 and the OpenMP `if` keeps it on the calling thread; two arguments (input, output), float32:
//   DYNAMO_LOGS=output_code PYTHONPATH=build/python /usr/bin/python3 -c 'import torch, dynamo;
//     dynamo.optimize("fused")(lambda x: ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid())(torch.randn(8 << 20))' \
//     2>&1 | awk '/^\/\/ k0_sigmoid: generated/{p=1} p' | sed 's/8388608LL/8192LL/g' > /tmp/k0_l1.cpp
//   g++ -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -fwrapv -std=c++17 -w \
//       -DKFILE='"/tmp/k0_l1.cpp"' -DKNAME=k0_sigmoid bench/kernel_call_l1_cost.cpp -o /tmp/l1 && /tmp/l1
// Prints the minimum over 2000 repeats of 8 calls, in ns per element. Nothing is asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include KFILE

int main() {
  const long long m = 8192;
  float* x = static_cast<float*>(aligned_alloc(64, m * 4));
  float* y = static_cast<float*>(aligned_alloc(64, m * 4));
  for (long long i = 0; i < m; ++i) x[i] = (i % 1000) * 0.01f - 5.f, y[i] = 0;
  void* args[2] = {x, y};
  double best = 1e9;
  for (int r = 0; r < 2000; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < 8; ++c) KNAME(args);
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    __asm__ volatile("" ::: "memory");
  }
  std::printf("%.3f ns/element on one thread in L1 (minimum of 2000 x 8 calls of %lld elements)\n", best / (8 * m) * 1e9, m);
}
