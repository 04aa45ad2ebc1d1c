// A fused mm step's product on the OpenMP (libgomp) pool, one single-threaded OpenBLAS GEMM per
// thread over its share of the result's rows (or columns).
//
// Why: on this machine torch's BLAS is OpenBLAS built with its own pthread pool, while the
// generated kernels, ATen's parallel_for and oneDNN run on libgomp's. After a parallel region
// libgomp's workers keep spinning on their core (GOMP_SPINCOUNT, ~300k pauses by default), and
// OpenBLAS's workers keep yield-spinning after a GEMM: with 2 cores, the next GEMM's OpenBLAS
// worker shares its core with a spinning libgomp worker and the whole GEMM waits for it
// (docs/performance.md, "mlp_train at 2 threads: one thread pool for the mm steps"). Here the
// GEMM runs on the libgomp team itself: the worker that spins picks the work up at once.
//
//   available(): this process's BLAS is OpenBLAS (libopenblas.so.0 already loaded, as under
//                Debian's torch); otherwise (MKL, stack 2) the caller runs at::mm_out
//   run():       out[m, n] = a[m, k] @ b[k, n], float32, each operand with one unit stride
//
// No torch header here: fused_backend.cpp includes this.
#pragma once

#include <cstdint>

namespace dynamo::backends {

/// One float32 matrix: a pointer and its strides in elements (one of them 1).
struct BlasMatrix {
  const float* data = nullptr;  ///< element [0, 0]
  int64_t rows = 0, cols = 0;   ///< sizes
  int64_t rowStride = 0;        ///< elements between rows
  int64_t colStride = 0;        ///< elements between columns
};

/// True when OpenBLAS is loaded in this process and its entry points were found (checked once).
bool blasSplitAvailable();

/// out = a @ b on `threads` libgomp threads, each an OpenBLAS GEMM with OpenBLAS's own threads
/// off (its thread count is 1 while any such call runs, restored after the last one). False,
/// with nothing written, when an operand has no unit stride or OpenBLAS is not available.
bool blasSplitMm(const BlasMatrix& a, const BlasMatrix& b, float* out, int64_t outRowStride, int threads);

}  // namespace dynamo::backends
