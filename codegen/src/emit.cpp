// C++ and CUDA C emission of loop-IR kernels. Both share the expression printer and the stage
// code (reductions and stores over the inner loops); they differ in the outer loop: OpenMP loops
// on the CPU, one thread per outer point on the GPU.
//
// Semantics follow ATen's CPU kernels: max/min with a scalar bound (clamp, relu) keep NaN the way
// std::max/std::min do there, maximum/minimum propagate NaN, amax/amin reductions propagate NaN,
// casts are C casts, float32 math uses the float functions (expf, ...).
#include "dynamo/codegen/emit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "dynamo/codegen/kernel_template.h"
#include "dynamo/common/error.h"

namespace dynamo::codegen {
namespace {

// Test only: DYNAMO_TEST_MISCOMPILE=<op>[:value|compile|crash] makes the emitters get that unary
// or binary op (its loop-IR name: tanh, add, max, ...) wrong in every kernel that contains it
// (dynamo-minify --after=kernel's tests inject a kernel generator bug with it, as
// DYNAMO_TEST_CORRUPT_NODE injects a pass bug): `value` adds 1e-2 to its result (an accuracy
// bug), `compile` calls a function that does not exist (the kernel does not compile), `crash`
// traps (SIGILL when the kernel runs). Unset: `code` as it is.
std::string testMiscompile(const char* opName, std::string code, const char* T) {
  const char* env = std::getenv("DYNAMO_TEST_MISCOMPILE");
  if (env == nullptr || *env == '\0') return code;
  std::string spec = env, name = spec.substr(0, spec.find(':'));
  std::string mode = spec.find(':') == std::string::npos ? "value" : spec.substr(spec.find(':') + 1);
  if (name != opName) return code;
  if (mode == "compile") return "dyn_test_miscompiled(" + code + ")";
  if (mode == "crash") return "(__builtin_trap(), " + code + ")";
  return std::string("((") + T + ")(" + code + " + (" + T + ")0.01))";
}

const char* testOpName(UnaryOp op) {
  static const char* kNames[] = {"neg", "abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt",
                                 "rsqrt", "erf", "floor", "trunc", "not", "isnan", "reciprocal"};
  return kNames[static_cast<int>(op)];
}

const char* testOpName(BinaryOp op) {
  static const char* kNames[] = {"add", "sub", "mul", "div", "max", "min", "maximum", "minimum",
                                 "pow", "floordiv", "eq", "ne", "lt", "le", "gt", "ge", "and", "or"};
  return kNames[static_cast<int>(op)];
}

// The libm functions the helpers below call, as the compiler's builtins, so that a host kernel
// includes no system header: <math.h> in C++17 is libstdc++'s <cmath> (20,000 lines, ~75 ms of
// every compiler run; a precompiled form is 15 MB to load, ~50-70 ms). GCC and Clang expand
// `__builtin_expf` inline or call libm's expf exactly as they do for the header's expf (the same
// object code: docs/codegen.md, "Generated C++ and the cache"); under NVRTC the names stay
// CUDA's device functions (emitCudaMarked leaves this out). Macros, not `extern "C"`
// declarations: a combined unit puts each kernel in a namespace, where GCC does not take an
// `extern "C"` declaration for the builtin (a call per element instead of sqrtss or a vector
// loop). Identical redefinitions are allowed, so every kernel of a unit may carry them; nothing
// after them includes a header.
const char* kHostMath = R"(#define fabsf __builtin_fabsf
#define fabs __builtin_fabs
#define expf __builtin_expf
#define exp __builtin_exp
#define erff __builtin_erff
#define erf __builtin_erf
#define logf __builtin_logf
#define log __builtin_log
#define tanhf __builtin_tanhf
#define tanh __builtin_tanh
#define sqrtf __builtin_sqrtf
#define sqrt __builtin_sqrt
#define floorf __builtin_floorf
#define floor __builtin_floor
#define truncf __builtin_truncf
#define trunc __builtin_trunc
#define powf __builtin_powf
#define pow __builtin_pow
#define fmodf __builtin_fmodf
#define fmod __builtin_fmod
)";

// Helpers shared by both targets. DYN_FN is `static inline` on the host and
// `__device__ __forceinline__` under NVRTC.
const char* kHelpers = R"(
// where(): both values are computed (every load is in bounds), then selected, so the compiler
// vectorises it with a blend instead of a masked load per branch.
template <class T> DYN_FN T dyn_select(bool c, T a, T b) { return c ? a : b; }
template <class T> DYN_FN T dyn_max(T a, T b) { return (a < b) ? b : a; }
template <class T> DYN_FN T dyn_min(T a, T b) { return (b < a) ? b : a; }
template <class T> DYN_FN T dyn_maxnan(T a, T b) { return (a != a) ? a : ((b != b) ? b : ((a > b) ? a : b)); }
template <class T> DYN_FN T dyn_minnan(T a, T b) { return (a != a) ? a : ((b != b) ? b : ((a < b) ? a : b)); }
template <class T> DYN_FN T dyn_redmax(T acc, T v) { return (v != v || v > acc) ? v : acc; }
template <class T> DYN_FN T dyn_redmin(T acc, T v) { return (v != v || v < acc) ? v : acc; }
template <class T> DYN_FN T dyn_abs(T x) { return x < 0 ? -x : x; }
DYN_FN float dyn_abs(float x) { return fabsf(x); }
DYN_FN double dyn_abs(double x) { return fabs(x); }
#ifdef DYN_VEC_EXP
// exp for float32 that the compiler can vectorise (libm's expf is a call per element): Cody-Waite
// reduction by ln 2, Cephes' degree-5 polynomial, 2^n applied in two halves so that results
// down to the denormals and up to FLT_MAX come out right; NaN passes through. About 1 ulp.
// No selects after the polynomial: the clamp alone makes x > 88.72 overflow to inf and
// x < -103.97 round to 0 in `y * s1 * s2`, and a NaN x stays NaN through the clamp and `y`
// (bitwise the same results as with explicit inf/0/NaN selects over all 2^32 inputs, checked with
// GCC 12; a fifth fewer instructions per element in chain6's sigmoid).
DYN_FN float dyn_exp(float x) {
  float xc = x < -104.0f ? -104.0f : (x > 88.8f ? 88.8f : x);
  float fx = floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
  float z = r * r;
  float y = (((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r +
               4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f) * z + r + 1.0f;
  int n = (int)fx;
  int n1 = n >> 1, n2 = n - n1;
  int b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  __builtin_memcpy(&s1, &b1, 4);
  __builtin_memcpy(&s2, &b2, 4);
  return y * s1 * s2;
}
// sigmoid for float32: 1 / (1 + exp(-x)) with dyn_exp's steps, but 2^n applied as 2^(n-1) * 2
// (one integer add and shift instead of six; n-1 stays a normal exponent for n in [-124, 128])
// and exp's argument clamped to [-86, 88.8] instead of [-104, 88.8]: below -86 exp gives less than
// 2^-24, so 1 + exp is 1 either way. Bitwise the results of 1 / (1 + dyn_exp(-x)) for all 2^32
// inputs (bench/sigmoid_exhaustive.cpp, GCC 12 with the kernel cache's flags), NaN, +-inf and
// the denormal results included.
DYN_FN float dyn_sigmoid(float x) {
  float u = -x;
  float xc = u < -86.0f ? -86.0f : (u > 88.8f ? 88.8f : u);
  float fx = floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
  float z = r * r;
  float y = (((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r +
               4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f) * z + r + 1.0f;
  int b = ((int)fx + 126) << 23;
  float s;
  __builtin_memcpy(&s, &b, 4);
  return 1.0f / (1.0f + y * s * 2.0f);
}
// erf for float32, vectorisable: |x| < 0.5 by its Taylor series to x^11 (relative error below
// 3e-8), else Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7; ATen uses Sleef's 1-ulp
// erff: standalone erf and gelu stay within float32 tolerance of it).
DYN_FN float dyn_erf(float x) {
  float ax = x < 0 ? -x : x;
  float x2 = x * x;
  float series = x * (1.1283791671f + x2 * (-0.3761263890f + x2 * (0.1128379167f + x2 * (-0.0268661706f +
                      x2 * (0.0052239776f + x2 * -0.0008548327f)))));
  float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                0.254829592f) * t;
  float r = 1.0f - poly * dyn_exp(-ax * ax);
  r = x < 0 ? -r : r;
  r = ax < 0.5f ? series : r;
  return x != x ? x : r;
}
#else
DYN_FN float dyn_exp(float x) { return expf(x); }
DYN_FN float dyn_erf(float x) { return erff(x); }
#endif
DYN_FN double dyn_exp(double x) { return exp(x); }
DYN_FN float dyn_log(float x) { return logf(x); }
DYN_FN double dyn_log(double x) { return log(x); }
DYN_FN float dyn_tanh(float x) { return tanhf(x); }
DYN_FN double dyn_tanh(double x) { return tanh(x); }
DYN_FN float dyn_sqrt(float x) { return sqrtf(x); }
DYN_FN double dyn_sqrt(double x) { return sqrt(x); }
DYN_FN double dyn_erf(double x) { return erf(x); }
DYN_FN float dyn_floor(float x) { return floorf(x); }
DYN_FN double dyn_floor(double x) { return floor(x); }
DYN_FN float dyn_trunc(float x) { return truncf(x); }
DYN_FN double dyn_trunc(double x) { return trunc(x); }
DYN_FN float dyn_pow(float x, float y) { return powf(x, y); }
DYN_FN double dyn_pow(double x, double y) { return pow(x, y); }
DYN_FN float dyn_fmod(float x, float y) { return fmodf(x, y); }
DYN_FN double dyn_fmod(double x, double y) { return fmod(x, y); }
template <class T> DYN_FN T dyn_sigmoid(T x) { return T(1) / (T(1) + dyn_exp(-x)); }
template <class T> DYN_FN T dyn_rsqrt(T x) { return T(1) / dyn_sqrt(x); }
template <class T> DYN_FN T dyn_floordiv(T a, T b) {
  if (b == 0) return a / b;
  T mod = dyn_fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
  if (div != 0) {
    T fl = dyn_floor(div);
    if (div - fl > T(0.5)) fl += T(1);
    return fl;
  }
  return (a / b < 0) ? -T(0) : T(0);
}
)";

// Explicit SIMD for the C++ kernels' contiguous float32 pointwise loops (emitCppMarked,
// VectorPrinter): 8 lanes in GCC vector types, AVX builtins (no header), compiled only where the
// kernel's compiler targets AVX2 (-march=native; the CPU features are in the kernel cache's key);
// elsewhere the scalar loop as before. Each helper gives the bits its scalar twin above gives,
// lane by lane (tests/python/test_fused_ops.py: test_vector_helpers_*). GCC vectorises the scalar
// twins too, but folds the constants of a chain through relu's ternary into compares and blends
// (~50 instructions per 8 elements in bench/fused.py's chain6 against 31 here).
const char* kVectorHelpers = R"(
#if defined(__AVX2__)
typedef float dyn_vf __attribute__((vector_size(32)));
typedef int dyn_vi __attribute__((vector_size(32)));
static inline dyn_vf dyn_vload(const float* p) { dyn_vf v; __builtin_memcpy(&v, p, 32); return v; }
static inline void dyn_vstore(float* p, dyn_vf v) { __builtin_memcpy(p, &v, 32); }
static inline dyn_vf dyn_vbc(float f) { return (dyn_vf){f, f, f, f, f, f, f, f}; }
// dyn_max(a, b) = (a < b) ? b : a is maxps(b, a): maxps returns its second operand unless the
// first is greater, so a NaN in either operand and -0.0 against +0.0 come out as in the ternary.
static inline dyn_vf dyn_vmax(dyn_vf a, dyn_vf b) { return __builtin_ia32_maxps256(b, a); }
static inline dyn_vf dyn_vmin(dyn_vf a, dyn_vf b) { return __builtin_ia32_minps256(b, a); }
// dyn_maxnan: a where a is NaN (unordered compare), else maxps(a, b): b where b is NaN, else
// (a > b) ? a : b.
static inline dyn_vf dyn_vmaxnan(dyn_vf a, dyn_vf b) {
  return __builtin_ia32_blendvps256(__builtin_ia32_maxps256(a, b), a, __builtin_ia32_cmpps256(a, a, 3));
}
static inline dyn_vf dyn_vminnan(dyn_vf a, dyn_vf b) {
  return __builtin_ia32_blendvps256(__builtin_ia32_minps256(a, b), a, __builtin_ia32_cmpps256(a, a, 3));
}
static inline dyn_vf dyn_vabs(dyn_vf x) { return (dyn_vf)((dyn_vi)x & 0x7fffffff); }
static inline dyn_vf dyn_vsqrt(dyn_vf x) { return __builtin_ia32_sqrtps256(x); }
// dyn_exp's steps (the clamp as vminps/vmaxps, floorf as vroundps toward -inf).
static inline dyn_vf dyn_vexp(dyn_vf x) {
  dyn_vf xc = dyn_vmax(dyn_vmin(x, dyn_vbc(88.8f)), dyn_vbc(-104.0f));
  dyn_vf fx = __builtin_ia32_roundps256(xc * 1.44269504088896341f + 0.5f, 1);
  dyn_vf r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
  dyn_vf z = r * r;
  dyn_vf y = (((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r +
                4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f) * z + r + 1.0f;
  dyn_vi n = __builtin_convertvector(fx, dyn_vi);
  dyn_vi n1 = n >> 1, n2 = n - n1;
  dyn_vi b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  return y * (dyn_vf)b1 * (dyn_vf)b2;
}
// dyn_sigmoid's steps (float32: exp's argument clamped to [-86, 88.8], 2^n as 2^(n-1) * 2).
static inline dyn_vf dyn_vsigmoid(dyn_vf x) {
  dyn_vf xc = dyn_vmax(dyn_vmin(-x, dyn_vbc(88.8f)), dyn_vbc(-86.0f));
  dyn_vf fx = __builtin_ia32_roundps256(xc * 1.44269504088896341f + 0.5f, 1);
  dyn_vf r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
  dyn_vf z = r * r;
  dyn_vf y = (((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r +
                4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f) * z + r + 1.0f;
  dyn_vi b = (__builtin_convertvector(fx, dyn_vi) + 126) << 23;
  return 1.0f / (1.0f + y * (dyn_vf)b * 2.0f);
}
#endif
)";

// The non-temporal 8-lane store of the streaming loop (VectorStores::stream): p 32-byte aligned.
const char* kStreamHelper = R"(
#if defined(__AVX2__)
static inline void dyn_vstream(float* p, dyn_vf v) { __builtin_ia32_movntps256(p, v); }
#endif
)";

std::string number(DType t, double v) {
  char buf[64];
  if (t == DType::kBool) return v != 0 ? "true" : "false";
  if (!isFloating(t)) {
    std::snprintf(buf, sizeof buf, "((%s)%lldLL)", dtypeCType(t), static_cast<long long>(v));
    return buf;
  }
  if (std::isnan(v)) return std::string("((") + dtypeCType(t) + ")dyn_nan())";
  if (std::isinf(v)) return std::string("((") + dtypeCType(t) + ")(" + (v < 0 ? "-" : "") + "dyn_inf()))";
  std::snprintf(buf, sizeof buf, "((%s)%.17g)", dtypeCType(t), v);
  return buf;
}

// A size integer (an extent, an affine offset or coefficient, a work count), marked for the
// kernel templates (kernel_template.h): printed "64LL" by literalSource, or read from the size
// parameters of a parametrised kernel.
std::string sizeInt(int64_t v) { return kSizeIntOpen + std::to_string(v) + kSizeIntClose; }

// A floating constant is marked too, printed as number() prints it ("((float)0.5)"): a
// constant computed from sizes (a mean's element count, batch_norm's 1 / N) then varies as a
// parameter (a double) instead of making a kernel text per size. Zero (number() prints -0.0 as
// "-0", an int) and non-finite values stay plain numbers.
std::string constant(DType t, double v) {
  if (!isFloating(t) || v == 0 || !std::isfinite(v)) return number(t, v);
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return std::string("((") + dtypeCType(t) + ")" + kSizeIntOpen + std::to_string(bits) + kSizeDouble + kSizeIntClose + ")";
}

std::string affine(const Affine& a, size_t nOuter) {
  std::ostringstream o;
  o << sizeInt(a.offset);
  for (size_t i = 0; i < a.coeffs.size(); ++i) {
    if (a.coeffs[i] == 0) continue;
    o << " + " << sizeInt(a.coeffs[i]) << "*" << (i < nOuter ? "x" : "r") << (i < nOuter ? i : i - nOuter);
  }
  return o.str();
}

class Printer {
 public:
  Printer(size_t nOuter, int rawStage) : nOuter_(nOuter), rawStage_(rawStage) {}

  std::string print(const Expr& e) const {
    const char* T = dtypeCType(e->dtype());
    const auto& ops = e->operands();
    switch (e->kind()) {
      case ExprKind::kLoad: {
        std::string l = "b" + std::to_string(e->buffer()) + "[" + affine(e->index(), nOuter_) + "]";
        return e->dtype() == DType::kBool ? "((bool)" + l + ")" : l;
      }
      case ExprKind::kConst: return constant(e->dtype(), e->value());
      case ExprKind::kReduced:
        return (e->stage() == rawStage_ ? "acc" : "red") + std::to_string(e->stage());
      case ExprKind::kScalar: return "dyn_a" + std::to_string(e->scalar());
      case ExprKind::kCast: return std::string("((") + T + ")(" + print(ops[0]) + "))";
      case ExprKind::kWhere:
        return std::string("dyn_select<") + T + ">((bool)(" + print(ops[0]) + "), (" + T + ")(" + print(ops[1]) + "), (" + T + ")(" +
               print(ops[2]) + "))";
      case ExprKind::kUnary: return unary(e, T);
      case ExprKind::kBinary: return binary(e);
    }
    return "?";
  }

 private:
  std::string unary(const Expr& e, const char* T) const {
    return testMiscompile(testOpName(e->unary()), unaryCode(e, T), T);
  }

  std::string unaryCode(const Expr& e, const char* T) const {
    std::string a = print(e->operands()[0]);
    switch (e->unary()) {
      case UnaryOp::kNeg: return std::string("((") + T + ")(-" + a + "))";
      case UnaryOp::kAbs: return "dyn_abs(" + a + ")";
      case UnaryOp::kRelu: return std::string("dyn_max(") + a + ", (" + T + ")0)";
      case UnaryOp::kSigmoid: return "dyn_sigmoid(" + a + ")";
      case UnaryOp::kTanh: return "dyn_tanh(" + a + ")";
      case UnaryOp::kExp: return "dyn_exp(" + a + ")";
      case UnaryOp::kLog: return "dyn_log(" + a + ")";
      case UnaryOp::kSqrt: return "dyn_sqrt(" + a + ")";
      case UnaryOp::kRsqrt: return "dyn_rsqrt(" + a + ")";
      case UnaryOp::kErf: return "dyn_erf(" + a + ")";
      case UnaryOp::kFloor: return "dyn_floor(" + a + ")";
      case UnaryOp::kTrunc: return "dyn_trunc(" + a + ")";
      case UnaryOp::kNot: return "(!" + a + ")";
      case UnaryOp::kIsNan: return "(" + a + " != " + a + ")";
      case UnaryOp::kReciprocal: return std::string("((") + T + ")1 / " + a + ")";
    }
    return "?";
  }

  std::string binary(const Expr& e) const {
    return testMiscompile(testOpName(e->binary()), binaryCode(e), dtypeCType(e->dtype()));
  }

  std::string binaryCode(const Expr& e) const {
    const Expr& l = e->operands()[0];
    std::string a = print(l), b = print(e->operands()[1]);
    const char* T = dtypeCType(e->dtype());
    auto infix = [&](const char* op) { return std::string("((") + T + ")(" + a + " " + op + " " + b + "))"; };
    switch (e->binary()) {
      case BinaryOp::kAdd: return infix("+");
      case BinaryOp::kSub: return infix("-");
      case BinaryOp::kMul: return infix("*");
      case BinaryOp::kDiv: return infix("/");
      case BinaryOp::kMax: return "dyn_max(" + a + ", " + b + ")";
      case BinaryOp::kMin: return "dyn_min(" + a + ", " + b + ")";
      case BinaryOp::kMaxNan: return "dyn_maxnan(" + a + ", " + b + ")";
      case BinaryOp::kMinNan: return "dyn_minnan(" + a + ", " + b + ")";
      case BinaryOp::kPow: return "dyn_pow(" + a + ", " + b + ")";
      case BinaryOp::kFloorDiv: return "dyn_floordiv(" + a + ", " + b + ")";
      case BinaryOp::kEq: return "(" + a + " == " + b + ")";
      case BinaryOp::kNe: return "(" + a + " != " + b + ")";
      case BinaryOp::kLt: return "(" + a + " < " + b + ")";
      case BinaryOp::kLe: return "(" + a + " <= " + b + ")";
      case BinaryOp::kGt: return "(" + a + " > " + b + ")";
      case BinaryOp::kGe: return "(" + a + " >= " + b + ")";
      case BinaryOp::kAnd: return "(" + a + " && " + b + ")";
      case BinaryOp::kOr: return "(" + a + " || " + b + ")";
    }
    return "?";
  }

  size_t nOuter_;
  int rawStage_;
};

// The vector form (kVectorHelpers) of a pointwise kernel's float32 expression, 8 lanes along the
// last loop variable. An expression that does not depend on it (constants, Python numbers,
// loads broadcast along it) is uniform: printed by Printer and broadcast where it meets a vector.
// print() returns false for what has no vector form (other dtypes, strided loads, where,
// comparisons, libm calls): the kernel then keeps its scalar loop.
class VectorPrinter {
 public:
  explicit VectorPrinter(size_t nOuter) : nOuter_(nOuter), scalar_(nOuter, -1) {}

  struct Code {
    std::string text;  ///< C++ text: a dyn_vf when varying, else a scalar of the node's type
    bool varying;      ///< depends on the last loop variable
  };

  bool print(const Expr& e, Code& out) const {
    if (!dependsOnLast(e)) {
      out = {scalar_.print(e), false};
      return true;
    }
    if (e->dtype() != DType::kFloat32) return false;
    const auto& ops = e->operands();
    std::vector<std::string> a(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      Code c;
      if (ops[i]->dtype() != DType::kFloat32 || !print(ops[i], c)) return false;
      a[i] = c.varying ? c.text : "dyn_vbc(" + c.text + ")";
    }
    out.varying = true;
    switch (e->kind()) {
      case ExprKind::kLoad: {
        if (e->index().coeffs[nOuter_ - 1] != 1) return false;
        Affine rest = e->index();
        rest.coeffs[nOuter_ - 1] = 0;
        out.text = "dyn_vload(b" + std::to_string(e->buffer()) + " + (" + affine(rest, nOuter_) + " + x" +
                   std::to_string(nOuter_ - 1) + "))";
        return true;
      }
      case ExprKind::kCast: out.text = a[0]; return true;
      case ExprKind::kUnary: return unary(e->unary(), a[0], out.text);
      case ExprKind::kBinary: return binary(e->binary(), a[0], a[1], out.text);
      default: return false;
    }
  }

  /// Whether e reads a buffer at an index that moves with the last loop variable.
  bool dependsOnLast(const Expr& e) const {
    bool moves = false;
    forEachExpr(e, [&](const ExprNode& x) {
      if (x.kind() == ExprKind::kLoad && x.index().coeffs.size() >= nOuter_ && x.index().coeffs[nOuter_ - 1] != 0) moves = true;
      if (x.kind() == ExprKind::kReduced) moves = true;  // (not in a pointwise kernel)
    });
    return moves;
  }

 private:
  static bool unary(UnaryOp op, const std::string& a, std::string& out) {
    switch (op) {
      case UnaryOp::kNeg: out = "(-" + a + ")"; return true;
      case UnaryOp::kAbs: out = "dyn_vabs(" + a + ")"; return true;
      case UnaryOp::kRelu: out = "dyn_vmax(" + a + ", dyn_vbc(0.0f))"; return true;
      case UnaryOp::kSigmoid: out = "dyn_vsigmoid(" + a + ")"; return true;
      case UnaryOp::kExp: out = "dyn_vexp(" + a + ")"; return true;
      case UnaryOp::kSqrt: out = "dyn_vsqrt(" + a + ")"; return true;
      case UnaryOp::kRsqrt: out = "(1.0f / dyn_vsqrt(" + a + "))"; return true;
      case UnaryOp::kReciprocal: out = "(1.0f / " + a + ")"; return true;
      default: return false;
    }
  }

  static bool binary(BinaryOp op, const std::string& a, const std::string& b, std::string& out) {
    switch (op) {
      case BinaryOp::kAdd: out = "(" + a + " + " + b + ")"; return true;
      case BinaryOp::kSub: out = "(" + a + " - " + b + ")"; return true;
      case BinaryOp::kMul: out = "(" + a + " * " + b + ")"; return true;
      case BinaryOp::kDiv: out = "(" + a + " / " + b + ")"; return true;
      case BinaryOp::kMax: out = "dyn_vmax(" + a + ", " + b + ")"; return true;
      case BinaryOp::kMin: out = "dyn_vmin(" + a + ", " + b + ")"; return true;
      case BinaryOp::kMaxNan: out = "dyn_vmaxnan(" + a + ", " + b + ")"; return true;
      case BinaryOp::kMinNan: out = "dyn_vminnan(" + a + ", " + b + ")"; return true;
      default: return false;
    }
  }

  size_t nOuter_;
  Printer scalar_;
};

// The vector stores of a pointwise kernel (one per stage, inside the loop over x<last> in
// steps of 8), or an empty list when the kernel keeps its scalar loop: a stage that is not a
// float32 store contiguous along the last loop variable, or a value with no vector form.
// DYNAMO_TEST_MISCOMPILE (a test hook that rewrites the scalar text) keeps every kernel scalar.
// `plain` stores through dyn_vstore; `stream`, filled only where streamingPays, holds the same
// stores through dyn_vstream (non-temporal) and `bases` the address each store starts from (their
// 32-byte alignment is checked at run time).
struct VectorStores {
  std::vector<std::string> plain, stream, bases;
};

// Streaming stores skip the read-for-ownership of the output's cache lines and leave them out of
// the caches: worth it only where the output cannot stay cached anyway, and where the kernel does
// not read what it writes. Below kStreamMinElements float32 outputs (16 MiB, half this machine's
// 32 MiB L3) the consumer may still find the output in L3: ordinary stores. One loop dim only
// (the lowering collapses a contiguous tensor into one), so each 8-lane step stays aligned.
// Off unless DYNAMO_FUSED_STREAM_STORES=1: on this machine they have not paid yet (bench/
// fused_chain6_variants.cpp's vec_nt row, docs/performance.md "chain6: streaming stores").
constexpr int64_t kStreamMinElements = 4LL << 20;

bool streamingPays(const Kernel& k) {
  const char* on = std::getenv("DYNAMO_FUSED_STREAM_STORES");
  if (!on || std::strcmp(on, "1") != 0) return false;
  if (k.outerSizes.size() != 1 || k.outerSizes[0] < kStreamMinElements) return false;
  for (const Stage& st : k.stages) {
    if (std::binary_search(k.reads.begin(), k.reads.end(), st.buffer)) return false;
  }
  return true;
}

VectorStores vectorStores(const Kernel& k) {
  size_t nOuter = k.outerSizes.size();
  const char* miscompile = std::getenv("DYNAMO_TEST_MISCOMPILE");
  if (nOuter == 0 || !k.innerSizes.empty() || k.outerSizes.back() < 8 || (miscompile && *miscompile)) return {};
  VectorPrinter vp(nOuter);
  VectorStores out;
  bool stream = streamingPays(k);
  for (const Stage& st : k.stages) {
    if (st.kind != Stage::Kind::kStoreOuter || st.value->dtype() != DType::kFloat32 || st.index.coeffs.size() != nOuter ||
        st.index.coeffs[nOuter - 1] != 1)
      return {};
    VectorPrinter::Code c;
    if (!vp.print(st.value, c)) return {};
    Affine rest = st.index;
    rest.coeffs[nOuter - 1] = 0;
    std::string buf = "b" + std::to_string(st.buffer), off = affine(rest, nOuter);
    std::string args = "(" + buf + " + (" + off + " + x" + std::to_string(nOuter - 1) + "), " +
                       (c.varying ? c.text : "dyn_vbc(" + c.text + ")") + ");";
    out.plain.push_back("dyn_vstore" + args);
    if (!stream) continue;
    out.stream.push_back("dyn_vstream" + args);
    out.bases.push_back("(" + buf + " + (" + off + "))");
  }
  return out;
}

std::string reduceInit(ReduceOp op, DType t) {
  if (op == ReduceOp::kSum) return number(t, 0);
  if (isFloating(t)) return number(t, op == ReduceOp::kMax ? -INFINITY : INFINITY);
  const char* T = dtypeCType(t);
  // The smallest / largest value of the integer type.
  std::string bits = std::to_string(dtypeSize(t) * 8 - 1);
  if (op == ReduceOp::kMax) {
    return t == DType::kUInt8 ? "((unsigned char)0)" : std::string("((") + T + ")(-(1LL << " + bits + ")))";
  }
  return t == DType::kUInt8 ? "((unsigned char)255)" : std::string("((") + T + ")((1ULL << " + bits + ") - 1))";
}

// The stage code for one outer point (shared by C++ and CUDA). `simd`: emit OpenMP simd hints.
// `parallelWork` > 0: a kernel with no outer loop whose one stage is a sum runs its reduction
// loop with an OpenMP parallel reduction instead.
void emitStages(std::ostringstream& o, const Kernel& k, const std::string& ind, bool simd,
                int64_t parallelWork = 0) {
  size_t nOuter = k.outerSizes.size();
  // reduceSimd: a sum (simd with a reduction clause); noSimd: a max/min reduction (a loop-carried
  // dependence the simd pragma would break).
  auto innerLoops = [&](std::string& in, bool reduceSimd, const std::string& acc, bool noSimd = false) {
    for (size_t r = 0; r < k.innerSizes.size(); ++r) {
      if (r == 0 && parallelWork > 0 && reduceSimd) {
        o << in << "#pragma omp parallel for reduction(+:" << acc << ") schedule(static) if("
          << sizeInt(parallelWork) << " >= 32768LL)\n";
        if (k.innerSizes.size() == 1) {
          o << in << "for (long long r0 = 0; r0 < " << sizeInt(k.innerSizes[0]) << "; ++r0) {\n";
          in += "  ";
          continue;
        }
      }
      if (simd && !noSimd && r + 1 == k.innerSizes.size()) {
        o << in << (reduceSimd ? "#pragma omp simd reduction(+:" + acc + ")\n" : std::string("#pragma omp simd\n"));
      }
      o << in << "for (long long r" << r << " = 0; r" << r << " < " << sizeInt(k.innerSizes[r]) << "; ++r" << r << ") {\n";
      in += "  ";
    }
  };
  auto close = [&](std::string& in) {
    for (size_t r = 0; r < k.innerSizes.size(); ++r) {
      in.resize(in.size() - 2);
      o << in << "}\n";
    }
  };
  for (size_t i = 0; i < k.stages.size(); ++i) {
    const Stage& st = k.stages[i];
    Printer p(nOuter, -1);
    std::string in = ind;
    switch (st.kind) {
      case Stage::Kind::kReduce: {
        DType t = st.value->dtype();
        const char* T = dtypeCType(t);
        std::string acc = "acc" + std::to_string(i);
        std::string v = p.print(st.value);
        if (st.reduce == ReduceOp::kSum) {
          // Long float32 sums (over 4096 elements) accumulate in double: the simd lanes and
          // threads split the sum, but a long float accumulation would still drift from eager's
          // cascade sum. Short ones (rows of softmax, layer_norm) stay in float, as ATen's do.
          int64_t extent = 1;
          for (int64_t s : k.innerSizes) extent *= s;
          const char* A = (t == DType::kFloat32 && extent > 4096) ? "double" : T;
          size_t nInner = k.innerSizes.size();
          if (t == DType::kFloat32 && extent > 4096 && nInner >= 2 && k.innerSizes.back() <= 4096) {
            // Each innermost run (at most 4096 elements, vectorised) sums in float, as ATen's
            // cascade does; the runs add up in double. Converting every element to double
            // would halve the vector width.
            std::string part = "part" + std::to_string(i);
            o << in << "double " << acc << " = 0;\n";
            for (size_t r = 0; r + 1 < nInner; ++r) {
              if (r == 0 && parallelWork > 0) {
                o << in << "#pragma omp parallel for reduction(+:" << acc << ") schedule(static) if("
                  << sizeInt(parallelWork) << " >= 32768LL)\n";
              }
              o << in << "for (long long r" << r << " = 0; r" << r << " < " << sizeInt(k.innerSizes[r]) << "; ++r" << r << ") {\n";
              in += "  ";
            }
            o << in << "float " << part << " = 0;\n";
            if (simd) o << in << "#pragma omp simd reduction(+:" << part << ")\n";
            size_t last = nInner - 1;
            o << in << "for (long long r" << last << " = 0; r" << last << " < " << sizeInt(k.innerSizes[last]) << "; ++r" << last
              << ") {\n";
            o << in << "  " << part << " = (float)(" << part << " + (float)" << v << ");\n";
            o << in << "}\n";
            o << in << acc << " += (double)" << part << ";\n";
            for (size_t r = 0; r + 1 < nInner; ++r) {
              in.resize(in.size() - 2);
              o << in << "}\n";
            }
          } else {
            o << in << A << " " << acc << " = 0;\n";
            innerLoops(in, true, acc);
            o << in << acc << " = (" << A << ")(" << acc << " + (" << A << ")" << v << ");\n";
            close(in);
          }
        } else if (simd && !k.innerSizes.empty()) {
          o << in << T << " " << acc << " = " << reduceInit(st.reduce, t) << ";\n";
          // max/min: an OpenMP simd max/min reduction (vectorised), NaN tracked on the side so it
          // propagates as in ATen.
          const char* cmp = st.reduce == ReduceOp::kMax ? ">" : "<";
          std::string nan = "nan" + std::to_string(i);
          o << in << "int " << nan << " = 0;\n";
          for (size_t r = 0; r < k.innerSizes.size(); ++r) {
            if (r + 1 == k.innerSizes.size()) {
              o << in << "#pragma omp simd reduction(" << (st.reduce == ReduceOp::kMax ? "max" : "min")
                << ":" << acc << ") reduction(|:" << nan << ")\n";
            }
            o << in << "for (long long r" << r << " = 0; r" << r << " < " << sizeInt(k.innerSizes[r]) << "; ++r" << r << ") {\n";
            in += "  ";
          }
          o << in << T << " v = (" << T << ")(" << v << ");\n";
          if (isFloating(t)) o << in << nan << " |= (v != v);\n";
          o << in << acc << " = (v " << cmp << " " << acc << ") ? v : " << acc << ";\n";
          close(in);
          if (isFloating(t)) o << in << "if (" << nan << ") " << acc << " = (" << T << ")dyn_nan();\n";
        } else {
          o << in << T << " " << acc << " = " << reduceInit(st.reduce, t) << ";\n";
          innerLoops(in, false, acc, true);
          o << in << acc << " = dyn_red" << (st.reduce == ReduceOp::kMax ? "max" : "min") << "(" << acc << ", (" << T << ")(" << v << "));\n";
          close(in);
        }
        Printer raw(nOuter, static_cast<int>(i));
        const char* FT = dtypeCType(st.finish->dtype());
        o << in << FT << " red" << i << " = " << raw.print(st.finish) << ";\n";
        if (st.buffer >= 0) o << in << "b" << st.buffer << "[" << affine(st.index, nOuter) << "] = red" << i << ";\n";
        break;
      }
      case Stage::Kind::kStoreInner:
        innerLoops(in, false, "");
        o << in << "b" << st.buffer << "[" << affine(st.index, nOuter) << "] = " << p.print(st.value) << ";\n";
        close(in);
        break;
      case Stage::Kind::kStoreOuter:
        o << in << "b" << st.buffer << "[" << affine(st.index, nOuter) << "] = " << p.print(st.value) << ";\n";
        break;
    }
  }
}

// A column sum: one outer dim, one or more sum stages (none reading another's result) and
// outer stores of their results, and a load that walks the outer dim contiguously but
// the inner dims with a stride (a bias gradient, a sum over dim 0, layer_norm's weight and bias
// gradients). Emitted with the loops exchanged: a block of outer points keeps its accumulators
// in arrays, the inner loops walk rows, and the innermost loop runs over the block's columns
// (vectorised).
bool isColumnSum(const Kernel& k) {
  if (k.outerSizes.size() != 1 || k.innerSizes.empty() || k.stages.empty()) return false;
  bool column = false;
  for (const Stage& st : k.stages) {
    if (st.kind == Stage::Kind::kStoreOuter) continue;
    if (st.kind != Stage::Kind::kReduce || st.reduce != ReduceOp::kSum) return false;
    if (!isFloating(st.value->dtype())) return false;
    bool dependent = false;
    forEachExpr(st.value, [&](const ExprNode& x) {
      if (x.kind() == ExprKind::kReduced) dependent = true;
      if (x.kind() != ExprKind::kLoad) return;
      const auto& c = x.index().coeffs;
      bool strided = c.size() == 1 + k.innerSizes.size() && c[0] == 1;
      for (size_t r = 1; strided && r < c.size(); ++r) strided = c[r] != 1 && c[r] != -1;
      column = column || strided;
    });
    if (dependent) return false;
  }
  return column && k.stages.front().kind == Stage::Kind::kReduce;
}

void emitColumnSum(std::ostringstream& o, const Kernel& k, int64_t work) {
  constexpr int64_t kBlock = 64;
  int64_t extent = 1;
  for (int64_t s : k.innerSizes) extent *= s;
  int64_t n = k.outerSizes[0];
  Printer p(1, -1);
  auto accType = [&](const Stage& st) {
    DType t = st.value->dtype();
    return (t == DType::kFloat32 && extent > 4096) ? "double" : dtypeCType(t);
  };
  o << "  #pragma omp parallel for schedule(static) if(" << sizeInt(work) << " >= 32768LL)\n"
    << "  for (long long xb = 0; xb < " << sizeInt(n) << "; xb += " << kBlock << "LL) {\n"
    << "    long long xe = xb + " << kBlock << "LL < " << sizeInt(n) << " ? xb + " << kBlock << "LL : " << sizeInt(n) << ";\n";
  for (size_t i = 0; i < k.stages.size(); ++i) {
    if (k.stages[i].kind != Stage::Kind::kReduce) continue;
    o << "    " << accType(k.stages[i]) << " accv" << i << "[" << kBlock << "];\n"
      << "    for (long long i = 0; i < " << kBlock << "LL; ++i) accv" << i << "[i] = 0;\n";
  }
  std::string in = "    ";
  for (size_t r = 0; r < k.innerSizes.size(); ++r) {
    o << in << "for (long long r" << r << " = 0; r" << r << " < " << sizeInt(k.innerSizes[r]) << "; ++r" << r << ") {\n";
    in += "  ";
  }
  o << in << "#pragma omp simd\n" << in << "for (long long x0 = xb; x0 < xe; ++x0) {\n";
  for (size_t i = 0; i < k.stages.size(); ++i) {
    const Stage& st = k.stages[i];
    if (st.kind != Stage::Kind::kReduce) continue;
    o << in << "  accv" << i << "[x0 - xb] += (" << accType(st) << ")" << p.print(st.value) << ";\n";
  }
  o << in << "}\n";
  for (size_t r = 0; r < k.innerSizes.size(); ++r) {
    in.resize(in.size() - 2);
    o << in << "}\n";
  }
  o << "    for (long long x0 = xb; x0 < xe; ++x0) {\n";
  for (size_t i = 0; i < k.stages.size(); ++i) {
    const Stage& st = k.stages[i];
    if (st.kind == Stage::Kind::kReduce) {
      Printer raw(1, static_cast<int>(i));
      o << "      " << accType(st) << " acc" << i << " = accv" << i << "[x0 - xb];\n"
        << "      " << dtypeCType(st.finish->dtype()) << " red" << i << " = " << raw.print(st.finish) << ";\n";
      if (st.buffer >= 0) o << "      b" << st.buffer << "[" << affine(st.index, 1) << "] = red" << i << ";\n";
    } else {
      o << "      b" << st.buffer << "[" << affine(st.index, 1) << "] = " << p.print(st.value) << ";\n";
    }
  }
  o << "    }\n  }\n";
}

// The parameter array's mark (kernel_template.h): its argument (`c`: the CUDA parameter
// dyn_params), and after '+' how many scalars come before the size parameters.
std::string paramsMark(bool cuda, size_t argIndex, size_t scalars) {
  std::string m(1, kParamsOpen);
  if (cuda) m += kParamsArgument;
  m += std::to_string(argIndex);
  if (scalars > 0) m += "+" + std::to_string(scalars);
  return m + kParamsClose;
}

// Declarations of the Python numbers kernel k reads at call time (Program::scalars): the first
// entries of the parameter array `array`, each an int64 or a double's bits.
std::string scalarDecls(const Kernel& k, const Program& p, const std::string& array, bool cuda) {
  std::vector<int> scalars = kernelScalars(k);
  std::string o;
  for (size_t j = 0; j < scalars.size(); ++j) {
    std::string name = "dyn_a" + std::to_string(scalars[j]), at = array + "[" + std::to_string(j) + "]";
    if (p.scalars.at(scalars[j]).dtype == DType::kInt64) {
      o += "  const long long " + name + " = " + at + ";  // a Python int, read at call time\n";
    } else if (cuda) {
      o += "  const double " + name + " = dyn_bits_double(" + at + ");  // a Python float, read at call time\n";
    } else {
      o += "  double " + name + ";  // a Python float, read at call time\n  __builtin_memcpy(&" + name + ", &" + at +
           ", 8);\n";
    }
  }
  return o;
}

std::set<int> writtenSet(const Kernel& k) { return std::set<int>(k.writes.begin(), k.writes.end()); }

// The element type of a buffer pointer: bool buffers are `unsigned char` (GCC does not
// vectorise a loop that loads `bool` next to wider types; loads cast back to bool).
const char* memCType(DType t) { return t == DType::kBool ? "unsigned char" : dtypeCType(t); }

std::string paramDecl(const Kernel& k, const Program& p, int b) {
  bool w = writtenSet(k).count(b) > 0;
  return std::string(w ? "" : "const ") + memCType(p.buffers[b].dtype) + "* __restrict__ b" + std::to_string(b);
}

// Buffers written in place (Buffer::storage) share memory with another parameter of the kernel:
// per parameter position, the position of the written parameter whose pointer it uses, or -1.
// Such a pointer is declared from that one's (based on a __restrict__ pointer, as C's restrict
// allows), not as a second __restrict__ pointer to the same memory.
std::vector<int> sharedParams(const Kernel& k, const Program& p, const std::vector<int>& params) {
  auto root = [&](int b) { return p.buffers[b].storage >= 0 ? p.buffers[b].storage : b; };
  std::vector<int> leader(params.size(), -1);
  for (size_t i = 0; i < params.size(); ++i) {
    for (size_t j = 0; j < params.size(); ++j) {
      if (j != i && root(params[j]) == root(params[i]) && writtenSet(k).count(params[j])) {
        if (j < i || !writtenSet(k).count(params[i])) leader[i] = static_cast<int>(j);
        break;
      }
    }
  }
  return leader;
}

// The declarations of the in-place parameters (sharedParams), after the others.
std::string sharedDecls(const Kernel& k, const Program& p, const std::vector<int>& params, const std::vector<int>& leader) {
  std::string o;
  for (size_t i = 0; i < params.size(); ++i) {
    if (leader[i] < 0) continue;
    const bool w = writtenSet(k).count(params[i]) > 0;
    o += std::string("  ") + (w ? "" : "const ") + memCType(p.buffers[params[i]].dtype) + "* b" + std::to_string(params[i]) +
         " = b" + std::to_string(params[leader[i]]) + ";  // in place: the same memory\n";
  }
  return o;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t s : v) n *= s;
  return n;
}

}  // namespace

std::vector<int> kernelParams(const Kernel& k) {
  std::set<int> s(k.reads.begin(), k.reads.end());
  s.insert(k.writes.begin(), k.writes.end());
  return std::vector<int>(s.begin(), s.end());
}

namespace {
void emitScalarLoops(std::ostringstream& o, const Kernel& k, int64_t work);
void emitVectorLoops(std::ostringstream& o, const Kernel& k, const VectorStores& stores, int64_t work);
}  // namespace

std::string emitCpp(const Kernel& k, const Program& p) { return literalSource(emitCppMarked(k, p)); }

std::string emitCppMarked(const Kernel& k, const Program& p) {
  std::ostringstream o;
  // Explicit SIMD where the kernel qualifies (vectorStores): its helpers join the source then.
  VectorStores vec = vectorStores(k);
  o << "// " << k.name << ": generated by Dynamo's fused backend (C++). Nodes:";
  for (const std::string& n : k.nodes()) o << " " << n;
  o << "\n" << kHostMath << "#define DYN_FN static inline\n#define DYN_VEC_EXP 1\n"
    << "static inline double dyn_inf() { return __builtin_inf(); }\n"
    << "static inline double dyn_nan() { return __builtin_nan(\"\"); }\n"
    << kHelpers << (vec.plain.empty() ? "" : kVectorHelpers) << (vec.stream.empty() ? "" : kStreamHelper) << "\nextern \"C\" void " << k.name << "(void* const* args) {\n";
  std::vector<int> params = kernelParams(k);
  std::vector<int> leader = sharedParams(k, p, params);
  for (size_t i = 0; i < params.size(); ++i) {
    if (leader[i] >= 0) continue;
    o << "  " << paramDecl(k, p, params[i]) << " = (" << (writtenSet(k).count(params[i]) ? "" : "const ")
      << memCType(p.buffers[params[i]].dtype) << "*)args[" << i << "];\n";
  }
  o << sharedDecls(k, p, params, leader);
  // where size parameters are read (if any), after the scalars read at call time
  o << paramsMark(false, params.size(), kernelScalars(k).size());
  if (!kernelScalars(k).empty())
    o << scalarDecls(k, p, "((const long long*)args[" + std::to_string(params.size()) + "])", false);
  int64_t work = product(k.outerSizes) * std::max<int64_t>(product(k.innerSizes), 1);
  if (isColumnSum(k)) {
    emitColumnSum(o, k, work);
    o << "}\n";
    return o.str();
  }
  if (!vec.plain.empty()) {
    o << "#if defined(__AVX2__)\n";
    emitVectorLoops(o, k, vec, work);
    o << "#else\n";
  }
  emitScalarLoops(o, k, work);
  if (!vec.plain.empty()) o << "#endif\n";
  o << "}\n";
  return o.str();
}

namespace {

// A kernel's loops as scalar code (pointwise: the compiler vectorises the last loop).
void emitScalarLoops(std::ostringstream& o, const Kernel& k, int64_t work) {
  size_t nOuter = k.outerSizes.size();
  bool pointwise = k.innerSizes.empty();
  // Pointwise: parallel over all dims but the last (kept for the vectoriser) unless there is one.
  size_t par = pointwise ? (nOuter > 1 ? nOuter - 1 : nOuter) : nOuter;
  std::string ind = "  ";
  // A one-dim pointwise loop is `parallel for simd`: the loop body is outlined into OpenMP's
  // region function, where GCC no longer sees the __restrict__ of the pointers, so plain
  // `parallel for` made it compile the body twice more (a scalar copy behind a run-time alias
  // check, beside the vector loop and its epilogue); `simd` states what `parallel for` already
  // does (iterations independent), as the inner `omp simd` of the multi-dim case below does.
  // Its `if` is `if(parallel: ...)`: an unmodified `if` of a combined construct applies to every
  // construct that accepts one (OpenMP 5.0), simd included, so a small loop would run scalar.
  if (par > 0) {
    const bool simd = pointwise && nOuter == 1;
    o << ind << "#pragma omp parallel for" << (simd ? " simd" : "")
      << (par > 1 ? " collapse(" + std::to_string(par) + ")" : "")
      << " schedule(static) if(" << (simd ? "parallel: " : "") << sizeInt(work) << " >= 32768LL)\n";
  }
  for (size_t d = 0; d < nOuter; ++d) {
    if (pointwise && d + 1 == nOuter && nOuter > 1) o << ind << "#pragma omp simd\n";
    o << ind << "for (long long x" << d << " = 0; x" << d << " < " << sizeInt(k.outerSizes[d]) << "; ++x" << d << ") {\n";
    ind += "  ";
  }
  bool parallelSum = nOuter == 0 && k.stages.size() == 1 && k.stages[0].kind == Stage::Kind::kReduce &&
                     k.stages[0].reduce == ReduceOp::kSum;
  emitStages(o, k, ind, true, parallelSum ? work : 0);
  for (size_t d = 0; d < nOuter; ++d) {
    ind.resize(ind.size() - 2);
    o << ind << "}\n";
  }
}

// A pointwise kernel's loops with its stores in vector form (vectorStores): the last loop in
// steps of 8 lanes, then its remainder (under 8 points) as scalar code. Parallel over the outer
// dims (each point does its vector steps and its remainder), or over the vector steps when there
// is one dim. With streaming stores (one dim, streamingPays), the vector steps run with them when
// the output is large enough at run time and every store's start is 32-byte aligned, else with
// ordinary stores; each thread fences its streaming stores (sfence) before the region's barrier,
// so the output is complete and visible to whoever reads it after the kernel returns.
void emitVectorLoops(std::ostringstream& o, const Kernel& k, const VectorStores& stores, int64_t work) {
  size_t nOuter = k.outerSizes.size();
  std::string last = "x" + std::to_string(nOuter - 1);
  o << "  const long long dyn_n = " << sizeInt(k.outerSizes.back()) << ", dyn_nv = dyn_n - dyn_n % 8;\n";
  std::string ind = "  ";
  if (!stores.stream.empty()) {
    o << ind << "if (dyn_n >= " << kStreamMinElements << "LL && ((0ULL";
    for (const std::string& b : stores.bases) o << " | (unsigned long long)" << b;
    o << ") & 31ULL) == 0) {\n";
    o << ind << "  #pragma omp parallel if(" << sizeInt(work) << " >= 32768LL)\n" << ind << "  {\n";
    o << ind << "    #pragma omp for schedule(static) nowait\n";
    o << ind << "    for (long long " << last << " = 0; " << last << " < dyn_nv; " << last << " += 8) {\n";
    for (const std::string& s : stores.stream) o << ind << "      " << s << "\n";
    o << ind << "    }\n" << ind << "    __builtin_ia32_sfence();\n" << ind << "  }\n" << ind << "} else {\n";
    ind += "  ";
  }
  o << ind << "#pragma omp parallel for" << (nOuter > 2 ? " collapse(" + std::to_string(nOuter - 1) + ")" : "")
    << " schedule(static) if(" << sizeInt(work) << " >= 32768LL)\n";
  for (size_t d = 0; d + 1 < nOuter; ++d) {
    o << ind << "for (long long x" << d << " = 0; x" << d << " < " << sizeInt(k.outerSizes[d]) << "; ++x" << d << ") {\n";
    ind += "  ";
  }
  o << ind << "for (long long " << last << " = 0; " << last << " < dyn_nv; " << last << " += 8) {\n";
  for (const std::string& s : stores.plain) o << ind << "  " << s << "\n";
  o << ind << "}\n";
  if (!stores.stream.empty()) {  // one dim: the remainder follows both loops
    o << "  }\n";
    ind = "  ";
  }
  o << ind << "for (long long " << last << " = dyn_nv; " << last << " < dyn_n; ++" << last << ") {\n";
  emitStages(o, k, ind + "  ", false);
  o << ind << "}\n";
  for (size_t d = 0; d + 1 < nOuter; ++d) {
    ind.resize(ind.size() - 2);
    o << ind << "}\n";
  }
}

}  // namespace

std::string emitCuda(const Kernel& k, const Program& p) { return literalSource(emitCudaMarked(k, p)); }

std::string emitCudaMarked(const Kernel& k, const Program& p) {
  std::ostringstream o;
  std::vector<int> params = kernelParams(k);
  std::vector<int> leader = sharedParams(k, p, params);
  // The parameter array's mark: 'c' = a kernel parameter (dyn_params), not args[] (C++).
  const std::string mark = paramsMark(true, params.size(), kernelScalars(k).size());
  o << "// " << k.name << ": generated by Dynamo's fused backend (CUDA C). Nodes:";
  for (const std::string& n : k.nodes()) o << " " << n;
  o << "\n#ifdef DYN_HOST_SHIM\n"
    << kHostMath << "#define DYN_FN static inline\n#define __global__\n"
    << "struct dyn_dim3 { unsigned x, y, z; };\n"
    << "static dyn_dim3 blockIdx, threadIdx, blockDim, gridDim;\n"
    << "static inline double dyn_inf() { return __builtin_inf(); }\n"
    << "static inline double dyn_nan() { return __builtin_nan(\"\"); }\n"
    << "static inline double dyn_bits_double(long long b) { double v; __builtin_memcpy(&v, &b, 8); return v; }\n"
    << "#else\n#define DYN_FN __device__ __forceinline__\n"
    << "DYN_FN double dyn_inf() { return __longlong_as_double(0x7ff0000000000000ULL); }\n"
    << "DYN_FN double dyn_nan() { return __longlong_as_double(0x7ff8000000000000ULL); }\n"
    << "DYN_FN double dyn_bits_double(long long b) { return __longlong_as_double(b); }\n"
    << "#endif\n" << kHelpers << "\nextern \"C\" __global__ void " << k.name << "(";
  for (size_t i = 0; i < params.size(); ++i) {
    if (leader[i] >= 0) o << "const void* dyn_same_b" << params[i] << ", ";  // in place: unused
    else o << paramDecl(k, p, params[i]) << ", ";
  }
  // The size parameters (kernel_template.h): read only when the kernel is parametrised; a static
  // kernel may be passed null.
  o << "const long long* __restrict__ dyn_params";
  int64_t total = product(k.outerSizes);
  o << ") {\n" << sharedDecls(k, p, params, leader) << mark << scalarDecls(k, p, kParamsArgumentName, true) << "  long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    << "  if (tid >= " << sizeInt(total) << ") return;\n";
  for (int d = static_cast<int>(k.outerSizes.size()) - 1; d >= 0; --d) {
    o << "  long long x" << d << " = tid % " << sizeInt(k.outerSizes[d]) << "; tid /= " << sizeInt(k.outerSizes[d]) << ";\n";
  }
  o << "  (void)tid;\n";
  emitStages(o, k, "  ", false);
  o << "}\n";
  // The host shim: the grid as loops, blocks then threads; args[params.size()] is the parameter
  // array (always passed to the shim).
  o << "#ifdef DYN_HOST_SHIM\nextern \"C\" void " << k.name << "_host(void* const* args) {\n"
    << "  const long long* __restrict__ dyn_params = (const long long*)args[" << params.size() << "];\n"
    << mark << "  long long dyn_total = " << sizeInt(total) << ";\n"
    << "  blockDim.x = " << kCudaBlock << "; blockDim.y = blockDim.z = 1;\n"
    << "  gridDim.x = (unsigned)((dyn_total + " << kCudaBlock - 1 << "LL) / " << kCudaBlock << "LL); gridDim.y = gridDim.z = 1;\n"
    << "  for (unsigned b = 0; b < gridDim.x; ++b) {\n"
    << "    for (unsigned t = 0; t < " << kCudaBlock << "u; ++t) {\n"
    << "      blockIdx.x = b; threadIdx.x = t;\n      " << k.name << "(";
  for (size_t i = 0; i < params.size(); ++i) {
    bool w = writtenSet(k).count(params[i]) > 0;
    if (leader[i] >= 0) o << "(const void*)args[" << i << "], ";
    else o << "(" << (w ? "" : "const ") << memCType(p.buffers[params[i]].dtype) << "*)args[" << i << "], ";
  }
  o << "dyn_params);\n    }\n  }\n}\n#endif\n";
  return o.str();
}

}  // namespace dynamo::codegen
