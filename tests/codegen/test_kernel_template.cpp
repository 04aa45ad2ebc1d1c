// dynamo::codegen kernel templates (kernel_template.h): size integers as kernel parameters. The
// family bookkeeping on hand-made templates; then real kernels (a softmax over rows, a
// broadcast add whose flat extent has a vector tail) lowered at several sizes, parametrised,
// compiled once and run at every size against a plain reference.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dynamo/codegen/emit.h"
#include "dynamo/codegen/kernel_cache.h"
#include "dynamo/codegen/kernel_template.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/common/error.h"
#include "dynamo/core/graph.h"
#include "dynamo_catch.h"
#include "graph_meta.h"

using namespace dynamo;
using namespace dynamo::codegen;
using namespace dynamo::codegen::testing;

namespace {

std::string marked(const std::vector<int64_t>& ints, const std::string& tail = "") {
  std::string s = std::string("void k(void* const* args) {\n") + kParamsOpen + "1" + kParamsClose + "  a(";
  for (int64_t v : ints) s += kSizeIntOpen + std::to_string(v) + kSizeIntClose + ", ";
  return s + ")" + tail + ";\n}\n";
}

using KernelFn = void (*)(void* const*);

// One kernel family across sizes: compiled from the first size's source; every later size must
// print the same text (one compile for all sizes).
struct FamilyKernel {
  std::string source;
  KernelFn fn = nullptr;

  KernelFn compileFirst(const SizedKernel& k, const std::string& name, std::vector<std::string> flags = {}) {
    if (source.empty()) {
      source = k.source;
      fn = reinterpret_cast<KernelFn>(compileKernels({{k.source, name, std::move(flags)}})[0].symbol);
    }
    return fn;
  }
};

// Runs a row-mean kernel of 4 rows x cols and checks each mean exactly.
static void checkRowMean(KernelFn fn, SizedKernel& k, int64_t cols) {
  std::vector<float> x(4 * cols), y(4, -1.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.5f;
  void* args[] = {x.data(), y.data(), k.params.data()};
  fn(args);
  for (int64_t r = 0; r < 4; ++r) {
    float s = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    CHECK(y[r] == s / static_cast<float>(cols));
  }
}

Program softmaxAt(int64_t rows) {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({rows, 5}));
  auto s = b.callFunction(core::Target::atenOp("aten::_softmax"), {N(x), core::Arg::integer(-1), core::Arg::boolean(false)},
                          {}, meta({rows, 5}));
  b.output(N(s));
  return lowerGraph(b.build());
}

Program broadcastAddAt(int64_t rows) {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({rows, 37}));
  auto y = b.placeholder("y", meta({37}));
  auto a = b.callFunction(core::Target::atenOp("aten::add.Tensor"), {N(x), N(y)}, {}, meta({rows, 37}));
  auto r = b.callFunction(core::Target::atenOp("aten::mul.Tensor"), {N(a), core::Arg::floating(0.5)}, {}, meta({rows, 37}));
  b.output(N(r));
  return lowerGraph(b.build());
}

Program rowMeanAt(int64_t cols) {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({4, cols}));
  auto dims = core::Arg::list({core::Arg::integer(-1)});
  auto m = b.callFunction(core::Target::atenOp("aten::mean.dim"), {N(x), dims, core::Arg::boolean(false)}, {}, meta({4}));
  b.output(N(m));
  return lowerGraph(b.build());
}

}  // namespace

TEST_CASE("a template splits at the size marks and prints literals as the static emitter does") {
  KernelTemplate t = splitMarked(marked({4, -8}));
  CHECK(t.ints == std::vector<int64_t>{4, -8});
  CHECK(t.argIndex == 1);
  REQUIRE(t.text.size() == 3);
  CHECK(literalSource(marked({4, -8})) == "void k(void* const* args) {\n  a(4LL, -8LL, );\n}\n");
  CHECK_THROWS_WITH(splitMarked(std::string("a") + kSizeIntOpen + "12"),
                    Catch::Matchers::Contains("kernel template: unterminated mark at 1"));
}

TEST_CASE("a family parametrises the integers that differed from its reference, and only those") {
  const std::string scope = "unit-test-family";
  SizedKernel first = sizeKernel(splitMarked(marked({4, 8})), scope, false);
  CHECK(first.params.empty());
  CHECK(first.source == literalSource(marked({4, 8})));
  SizedKernel second = sizeKernel(splitMarked(marked({4, 16})), scope, true);
  CHECK(second.params == std::vector<int64_t>{16});
  CHECK(second.source.find("const long long* __restrict__ dyn_p = (const long long*)args[1];") != std::string::npos);
  CHECK(second.source.find("a(4LL, dyn_s0, )") != std::string::npos);
  // Another value of the same integer: the same source, so the same compiled kernel.
  SizedKernel third = sizeKernel(splitMarked(marked({4, 40})), scope, true);
  CHECK(third.source == second.source);
  CHECK(third.params == std::vector<int64_t>{40});
  // The reference's own values through the parametrised source.
  CHECK(sizeKernel(splitMarked(marked({4, 8})), scope, true).params == std::vector<int64_t>{8});
  // A newly differing integer: a new source (one more compile), kept for later sizes.
  SizedKernel fourth = sizeKernel(splitMarked(marked({5, 40})), scope, true);
  CHECK(fourth.source.find("a(dyn_s0, dyn_s1, )") != std::string::npos);
  CHECK(fourth.params == std::vector<int64_t>{5, 40});
  CHECK(sizeKernel(splitMarked(marked({4, 16})), scope, true).source == fourth.source);
  // Other text, or another scope: another family.
  CHECK(sizeKernel(splitMarked(marked({4, 16}, " + 1")), scope, true).params.empty());
  CHECK(sizeKernel(splitMarked(marked({4, 16})), scope + "-other", true).params.empty());
  // A static lowering still prints literals.
  CHECK(sizeKernel(splitMarked(marked({4, 16})), scope, false).source == literalSource(marked({4, 16})));
}

TEST_CASE("a softmax parametrised by its row count compiles once and is exact at every size") {
  const std::string scope = "unit-test-softmax";
  Program ref = softmaxAt(3);
  REQUIRE(ref.kernels.size() == 1);
  CHECK(sizeKernel(splitMarked(emitCppMarked(ref.kernels[0], ref)), scope, false).source == emitCpp(ref.kernels[0], ref));
  FamilyKernel family;
  for (int64_t rows : {7, 11, 2, 64}) {
    Program p = softmaxAt(rows);
    REQUIRE(p.kernels.size() == 1);
    SizedKernel k = sizeKernel(splitMarked(emitCppMarked(p.kernels[0], p)), scope, true);
    REQUIRE_FALSE(k.params.empty());
    KernelFn fn = family.compileFirst(k, p.kernels[0].name);
    CHECK(k.source == family.source);  // one kernel for every row count
    std::vector<float> x(rows * 5), y(rows * 5, -1.f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
    void* args[] = {x.data(), y.data(), k.params.data()};
    fn(args);
    for (int64_t r = 0; r < rows; ++r) {
      double m = -1e30, s = 0;
      for (int c = 0; c < 5; ++c) m = std::max(m, static_cast<double>(x[r * 5 + c]));
      for (int c = 0; c < 5; ++c) s += std::exp(x[r * 5 + c] - m);
      for (int c = 0; c < 5; ++c) CHECK(std::abs(y[r * 5 + c] - std::exp(x[r * 5 + c] - m) / s) < 1e-6);
    }
  }
}

TEST_CASE("a vectorised broadcast add with a run-time extent handles its tail at every size") {
  const std::string scope = "unit-test-broadcast";
  Program ref = broadcastAddAt(4);
  REQUIRE(ref.kernels.size() == 1);
  sizeKernel(splitMarked(emitCppMarked(ref.kernels[0], ref)), scope, false);
  FamilyKernel family;
  for (int64_t rows : {5, 1, 3, 17, 1000}) {  // 37 * rows elements: never a multiple of a vector
    Program p = broadcastAddAt(rows);
    REQUIRE(p.kernels.size() == 1);
    SizedKernel k = sizeKernel(splitMarked(emitCppMarked(p.kernels[0], p)), scope, true);
    if (rows == 1) {
      // Size 1: other loops (the broadcast dimension is gone), its own family or literal source.
      continue;
    }
    KernelFn fn = family.compileFirst(k, p.kernels[0].name);
    CHECK(k.source == family.source);
    std::vector<float> x(rows * 37), y(37), out(rows * 37 + 8, 12345.f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 101) - 50.f;
    for (int i = 0; i < 37; ++i) y[i] = static_cast<float>(i) * 0.25f;
    void* args[] = {x.data(), y.data(), out.data(), k.params.data()};
    fn(args);
    for (int64_t i = 0; i < rows * 37; ++i) CHECK(out[i] == (x[i] + y[i % 37]) * 0.5f);
    for (int64_t i = rows * 37; i < rows * 37 + 8; ++i) CHECK(out[i] == 12345.f);  // nothing past the end
  }
}

TEST_CASE("a mean over a dimension that varies divides by its count as a parameter: one kernel") {
  const std::string scope = "unit-test-mean";
  Program ref = rowMeanAt(6);
  REQUIRE(ref.kernels.size() == 1);
  std::string literal = emitCpp(ref.kernels[0], ref);
  CHECK(literal.find("((float)6)") != std::string::npos);  // the static text is unchanged
  CHECK(sizeKernel(splitMarked(emitCppMarked(ref.kernels[0], ref)), scope, false).source == literal);
  FamilyKernel family;
  for (int64_t cols : {7, 13, 3, 100}) {
    Program p = rowMeanAt(cols);
    REQUIRE(p.kernels.size() == 1);
    SizedKernel k = sizeKernel(splitMarked(emitCppMarked(p.kernels[0], p)), scope, true);
    KernelFn fn = family.compileFirst(k, p.kernels[0].name);
    CHECK(k.source == family.source);
    CHECK(k.source.find("((float)dyn_s") != std::string::npos);
    checkRowMean(fn, k, cols);
  }
}

TEST_CASE("a CUDA template reads its parameters from the kernel parameter, in the kernel and its shim") {
  std::string t = std::string("__global__ void k(float* b0, const long long* dyn_params) {\n") + kParamsOpen + "c1" +
                  kParamsClose + "  a(" + kSizeIntOpen + "8" + kSizeIntClose + ");\n}\nvoid k_host(void* const* args) {\n" +
                  kParamsOpen + "c1" + kParamsClose + "  b(" + kSizeIntOpen + "8" + kSizeIntClose + ");\n}\n";
  KernelTemplate kt = splitMarked(t);
  CHECK(kt.argIndex == 1);
  CHECK(kt.paramsArgument);
  std::vector<int64_t> params;
  std::string src = renderTemplate(kt, {true, true}, &params);
  CHECK(params == std::vector<int64_t>{8, 8});
  // Each function declares the array from dyn_params (no args[] in a CUDA kernel).
  size_t first = src.find("dyn_p = dyn_params;"), second = src.find("dyn_p = dyn_params;", first + 1);
  CHECK(first != std::string::npos);
  CHECK(second != std::string::npos);
  CHECK(src.find("args[1]") == std::string::npos);
  CHECK_THROWS_WITH(splitMarked(t + kParamsOpen + "2" + kParamsClose), Catch::Matchers::Contains(
                                                                             "kernel template: parameter marks for two arrays"));
}

TEST_CASE("a CUDA mean parametrised by its row length runs through the host shim at every size") {
  const std::string scope = "unit-test-cuda-mean";
  Program ref = rowMeanAt(6);
  REQUIRE(ref.kernels.size() == 1);
  CHECK(sizeKernel(splitMarked(emitCudaMarked(ref.kernels[0], ref)), scope, false).source == emitCuda(ref.kernels[0], ref));
  FamilyKernel family;
  for (int64_t cols : {7, 13, 3, 100}) {
    Program p = rowMeanAt(cols);
    REQUIRE(p.kernels.size() == 1);
    SizedKernel k = sizeKernel(splitMarked(emitCudaMarked(p.kernels[0], p)), scope, true);
    CHECK(k.source.find("dyn_bits_double(dyn_p[") != std::string::npos);  // the mean's 1 / count
    KernelFn fn = family.compileFirst(k, p.kernels[0].name + "_host", {"-DDYN_HOST_SHIM", "-x", "c++"});
    CHECK(k.source == family.source);
    checkRowMean(fn, k, cols);
  }
}

TEST_CASE("size parameters come after the numbers a kernel reads at call time") {
  // The mark "2+3": the array is args[2]; its first 3 entries are Python numbers (declared by the
  // emitter), so the first size parameter is dyn_p[3].
  std::string t = std::string("void k(void* const* args) {\n") + kParamsOpen + "2+3" + kParamsClose + "  a(" +
                  kSizeIntOpen + "8" + kSizeIntClose + ", " + kSizeIntOpen + "9" + kSizeIntClose + ");\n}\n";
  KernelTemplate kt = splitMarked(t);
  CHECK(kt.argIndex == 2);
  CHECK(kt.firstParam == 3);
  std::vector<int64_t> params;
  std::string src = renderTemplate(kt, {false, true}, &params);
  CHECK(params == std::vector<int64_t>{9});
  CHECK(src.find("const long long dyn_s0 = dyn_p[3];") != std::string::npos);
  CHECK(src.find("a(8LL, dyn_s0)") != std::string::npos);
  CHECK(literalSource(t).find("a(8LL, 9LL)") != std::string::npos);
  // A second mark must name the same array and count.
  CHECK_THROWS_WITH(splitMarked(t + kParamsOpen + "2+1" + kParamsClose),
                    Catch::Matchers::Contains("kernel template: parameter marks for two arrays"));
}
