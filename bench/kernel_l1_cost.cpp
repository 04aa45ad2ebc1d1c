// The compute cost of one generated pointwise body with the memory traffic taken away: the body
// runs over a 32 KiB (L1-resident) slice on one thread, compiled with the kernel cache's flags;
// the minimum over 2000 repeats, against the same loop as a plain copy (BODY(V)=(V)).
// Used for issue 10's chain6 bar (docs/codegen.md, "chain6 and the copy anchor"):
//   DYNAMO_LOGS=output_code ... > out.txt; awk '/^\/\/ k0_sigmoid: generated/{p=1} p' out.txt > k0.cpp
//   g++ -O3 -march=native -fno-math-errno -fno-trapping-math -fwrapv -DKFILE='"k0.cpp"' \
//       -D'BODY(V)=<the kernel loop's right-hand side with b0[...] replaced by V>' bench/kernel_l1_cost.cpp
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include KFILE

int main() {
  const long long n = 8LL << 20, m = 8192;
  float* x = static_cast<float*>(aligned_alloc(64, n * 4));
  float* y = static_cast<float*>(aligned_alloc(64, n * 4));
  for (long long i = 0; i < n; ++i) x[i] = (i % 1000) * 0.001f - 0.5f, y[i] = 0;
  double best = 1e9;
  for (int r = 0; r < 2000; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (long long i = 0; i < m; ++i) y[i] = BODY(x[i]);
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    __asm__ volatile("" ::: "memory");
  }
  std::printf("%.3f ns/element on one thread in L1 (minimum); %.2f ms for 8M elements on one core\n",
              best / m * 1e9, best / m * n * 1e3);
}
