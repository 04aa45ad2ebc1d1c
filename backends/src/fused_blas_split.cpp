// The libgomp-pool GEMM of the fused mm steps (fused_blas_split.h). Compiled with -fopenmp; finds
// OpenBLAS's entry points with dlsym in the copy torch already loaded (never loads one itself).
#include "fused_blas_split.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <mutex>

namespace dynamo::backends {
namespace {

// cblas.h's values, spelled here (no cblas header: the one OpenBLAS is used through dlsym).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                         int);
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

struct OpenBlas {
  SgemmFn sgemm = nullptr;
  SetThreadsFn setThreads = nullptr;
  GetThreadsFn getThreads = nullptr;
  // openblas_get_parallel(): 0 sequential build, 1 its own pthreads, 2 OpenMP. Only the pthread
  // build needs its threads turned off around a split GEMM: the OpenMP build already runs serially
  // inside a parallel region, and its openblas_set_num_threads would also set the caller's
  // omp_set_num_threads (torch's thread count for every later kernel on that thread).
  bool ownThreads = false;
  int procs = 0;  ///< openblas_get_num_procs(), 0 when unknown: the most GEMMs run at once
};

const OpenBlas& openBlas() {
  static const OpenBlas lib = [] {
    OpenBlas o;
    void* h = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD);  // only the copy already loaded
    if (!h) return o;
    o.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
    o.setThreads = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"));
    o.getThreads = reinterpret_cast<GetThreadsFn>(dlsym(h, "openblas_get_num_threads"));
    if (!o.sgemm || !o.setThreads || !o.getThreads) return OpenBlas{};
    auto parallel = reinterpret_cast<GetThreadsFn>(dlsym(h, "openblas_get_parallel"));
    auto procs = reinterpret_cast<GetThreadsFn>(dlsym(h, "openblas_get_num_procs"));
    o.ownThreads = parallel == nullptr || parallel() == 1;
    o.procs = procs ? procs() : 0;
    return o;
  }();
  return lib;
}

// OpenBLAS's thread count is process-wide: 1 while any split GEMM runs, the saved count after
// the last one returns (another thread's eager GEMM in that window runs on one thread).
class SerialOpenBlas {
 public:
  SerialOpenBlas() {
    if (!openBlas().ownThreads) return;
    std::lock_guard<std::mutex> g(mu());
    if (users()++ == 0) {
      saved() = openBlas().getThreads();
      openBlas().setThreads(1);
    }
  }
  ~SerialOpenBlas() {
    if (!openBlas().ownThreads) return;
    std::lock_guard<std::mutex> g(mu());
    if (--users() == 0) openBlas().setThreads(saved());
  }
  SerialOpenBlas(const SerialOpenBlas&) = delete;
  SerialOpenBlas& operator=(const SerialOpenBlas&) = delete;

 private:
  static std::mutex& mu() { static std::mutex m; return m; }
  static int& users() { static int n = 0; return n; }
  static int& saved() { static int n = 1; return n; }
};

constexpr int64_t kMaxInt = 0x7fffffff;  // BLAS sizes and leading dimensions are int

// (transpose flag, leading dimension) of a row-major operand, or false without a unit stride.
bool layoutOf(const BlasMatrix& x, int& trans, int& ld) {
  if (x.rowStride > kMaxInt || x.colStride > kMaxInt) return false;
  if (x.colStride == 1 && x.rowStride >= std::max<int64_t>(1, x.cols)) {
    trans = kNoTrans, ld = static_cast<int>(x.rowStride);
    return true;
  }
  if (x.rowStride == 1 && x.colStride >= std::max<int64_t>(1, x.rows)) {
    trans = kTrans, ld = static_cast<int>(x.colStride);
    return true;
  }
  return false;
}

}  // namespace

bool blasSplitAvailable() { return openBlas().sgemm != nullptr; }

bool blasSplitMm(const BlasMatrix& a, const BlasMatrix& b, float* out, int64_t outRowStride, int threads) {
  if (!blasSplitAvailable() || threads < 1) return false;
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  if (b.rows != k || m <= 0 || n <= 0 || k <= 0 || m > kMaxInt || n > kMaxInt || k > kMaxInt ||
      outRowStride < n || outRowStride > kMaxInt) {
    return false;
  }
  int ta = 0, lda = 0, tb = 0, ldb = 0;
  if (!layoutOf(a, ta, lda) || !layoutOf(b, tb, ldb)) return false;
  const bool byRows = m >= n;  // split the longer side of the result
  const int64_t len = byRows ? m : n;
  // At most one GEMM per processor OpenBLAS knows of (its buffer table is sized by that count).
  const int64_t cap = openBlas().procs > 0 ? std::min(threads, openBlas().procs) : threads;
  const int parts = static_cast<int>(std::min<int64_t>(cap, len));
  SerialOpenBlas serial;
  const OpenBlas& o = openBlas();
#pragma omp parallel num_threads(parts)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = len * t / nt, hi = len * (t + 1) / nt;
    if (hi > lo) {
      if (byRows) {
        const float* ap = a.data + lo * a.rowStride;
        o.sgemm(kRowMajor, ta, tb, static_cast<int>(hi - lo), static_cast<int>(n), static_cast<int>(k), 1.0f, ap, lda,
                b.data, ldb, 0.0f, out + lo * outRowStride, static_cast<int>(outRowStride));
      } else {
        const float* bp = b.data + lo * b.colStride;
        o.sgemm(kRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(hi - lo), static_cast<int>(k), 1.0f, a.data,
                lda, bp, ldb, 0.0f, out + lo, static_cast<int>(outRowStride));
      }
    }
  }
  return true;
}

}  // namespace dynamo::backends
