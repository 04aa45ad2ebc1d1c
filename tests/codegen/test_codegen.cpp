// dynamo::codegen: the loop IR's printer, lowering and fusion decisions (one kernel for a
// pointwise chain, one for softmax, externs for unsupported ops), the C++ emitter's output
// compiled and run on arrays, the disk cache (a second compile is a hit), SHA-256 vectors, and the
// CUBIN reader on non-ELF input. No Python interpreter is started.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dynamo/codegen/emit.h"
#include "dynamo/codegen/kernel_cache.h"
#include "dynamo/codegen/lowering.h"
#include "dynamo/codegen/nvrtc.h"
#include "dynamo/core/graph.h"
#include "dynamo_catch.h"
#include "graph_meta.h"

using namespace dynamo;
using namespace dynamo::codegen;
using namespace dynamo::codegen::testing;

namespace {

core::Graph chainGraph() {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({4, 8}));
  auto m = b.callFunction(core::Target::atenOp("aten::mul.Tensor"), {N(x), core::Arg::floating(2.0)}, {}, meta({4, 8}));
  auto a = b.callFunction(core::Target::atenOp("aten::add.Tensor"), {N(m), core::Arg::integer(1)}, {}, meta({4, 8}));
  auto r = b.callFunction(core::Target::atenOp("aten::relu"), {N(a)}, {}, meta({4, 8}));
  b.output(N(r));
  return b.build();
}

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-2 vectors") {
  CHECK(sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("a pointwise chain lowers to one kernel with coalesced loops") {
  Program p = lowerGraph(chainGraph());
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.externs.empty());
  CHECK(p.kernels[0].outerSizes == std::vector<int64_t>{32});
  CHECK(p.kernels[0].nodes() == std::vector<std::string>{"relu"});
  CHECK(printProgram(p).find("b1[1*x0] = max(add(mul(b0[1*x0], 2:float32), 1:float32), 0:float32)") !=
        std::string::npos);
  CHECK(p.arenaBytes == 0);
}

TEST_CASE("the emitted C++ compiles, runs, and is a cache hit the second time") {
  Program p = lowerGraph(chainGraph());
  std::string src = emitCpp(p.kernels[0], p);
  CHECK(src.find("#pragma omp parallel for") != std::string::npos);
  CHECK(src.find("torch") == std::string::npos);
  auto k1 = compileKernels({{src, p.kernels[0].name, {}}});
  auto k2 = compileKernels({{src, p.kernels[0].name, {}}});
  CHECK(k2[0].cacheHit);
  CHECK(k1[0].key == k2[0].key);
  std::vector<float> x(32), y(32, -7.f);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 16.f;
  void* args[] = {x.data(), y.data()};
  reinterpret_cast<void (*)(void* const*)>(k1[0].symbol)(args);
  for (int i = 0; i < 32; ++i) CHECK(y[i] == std::max(x[i] * 2.f + 1.f, 0.f));
}

TEST_CASE("kernels of one call share translation units: one compiler run per unit, every symbol found") {
  // three kernels from one emitter (same helpers, same includes) under distinct names, two units:
  // the helpers must not collide and each kernel must run its own body
  Program p = lowerGraph(chainGraph());
  std::string src = emitCpp(p.kernels[0], p);
  std::vector<CompileJob> jobs;
  for (int i = 0; i < 3; ++i) {
    std::string s = src, from = "void " + p.kernels[0].name + "(", to = "void unit_test_k" + std::to_string(i) + "(";
    s.replace(s.find(from), from.size(), to);
    jobs.push_back({s + "// variant " + std::to_string(i) + "\n", "unit_test_k" + std::to_string(i), {}});
  }
  setenv("DYNAMO_KERNEL_UNITS", "2", 1);
  auto loaded = compileKernels(jobs);
  auto again = compileKernels(jobs);
  unsetenv("DYNAMO_KERNEL_UNITS");
  REQUIRE(loaded.size() == 3);
  CHECK(loaded[0].key == loaded[2].key);  // dealt round-robin: kernels 0 and 2 share a unit
  CHECK(loaded[0].key != loaded[1].key);
  for (const auto& k : loaded) {
    REQUIRE(k.symbol);
    std::vector<float> x(32), y(32, -7.f);
    for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 16.f;
    void* args[] = {x.data(), y.data()};
    reinterpret_cast<void (*)(void* const*)>(k.symbol)(args);
    for (int i = 0; i < 32; ++i) CHECK(y[i] == std::max(x[i] * 2.f + 1.f, 0.f));
  }
  CHECK(again[0].cacheHit);
  CHECK(again[1].cacheHit);
  CHECK(again[2].symbol == loaded[2].symbol);
}

TEST_CASE("a small graph's kernels are one unit; units of 5 kernels, at most one per core, above that") {
  Program p = lowerGraph(chainGraph());
  std::string src = emitCpp(p.kernels[0], p);
  auto variants = [&](int n, const std::string& tag) {
    std::vector<CompileJob> jobs;
    for (int i = 0; i < n; ++i) {
      std::string s = src, from = "void " + p.kernels[0].name + "(", to = "void units_" + tag + std::to_string(i) + "(";
      s.replace(s.find(from), from.size(), to);
      jobs.push_back({s, "units_" + tag + std::to_string(i), {}});
    }
    return jobs;
  };
  unsetenv("DYNAMO_KERNEL_UNITS");
  auto four = compileKernels(variants(4, "four"));
  std::set<std::string> keys;
  for (const auto& k : four) keys.insert(k.key);
  CHECK(keys.size() == 1);
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  auto eleven = compileKernels(variants(11, "eleven"));
  keys.clear();
  for (const auto& k : eleven) keys.insert(k.key);
  CHECK(keys.size() == std::min<size_t>(cores, 3));
  for (const auto& k : eleven) CHECK(k.symbol);
}

namespace {
std::string fileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

bool compilerIsGcc() {
  const char* cxx = std::getenv("DYNAMO_CXX");
  std::string cmd = std::string(cxx && *cxx ? cxx : "c++") + " --version 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return false;
  std::string v;
  char buf[256];
  while (fgets(buf, sizeof buf, f)) v += buf;
  pclose(f);
  return v.find("Free Software Foundation") != std::string::npos && v.find("clang") == std::string::npos;
}

// What `fn` writes to this process's stderr (file descriptor 2).
template <typename Fn>
std::string stderrOf(Fn&& fn) {
  std::fflush(stderr);
  FILE* capture = std::tmpfile();
  const int saved = dup(2);
  dup2(fileno(capture), 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::rewind(capture);
  std::string text;
  for (int c; (c = std::fgetc(capture)) != EOF;) text += static_cast<char>(c);
  std::fclose(capture);
  return text;
}
}  // namespace

TEST_CASE("the lean link: a kernel library needs no libstdc++, and a unit that does still compiles") {
  const char* lean = std::getenv("DYNAMO_KERNEL_LEAN_LINK");
  const bool leanOn = compilerIsGcc() && !(lean && std::string(lean) == "0");
  Program p = lowerGraph(chainGraph());
  auto plain = compileKernels({{emitCpp(p.kernels[0], p), p.kernels[0].name, {}}});
  REQUIRE(plain[0].symbol);
  if (leanOn) CHECK(fileBytes(plain[0].path).find("libstdc++.so") == std::string::npos);
  // operator new is libstdc++'s: the lean link's `-z defs` rejects the unit, which is compiled
  // again with the driver's default link (a new source each run, so the compiler really runs)
  std::string src = "#include <math.h>\n#include <new>\n// run " + std::to_string(::getpid()) + "." +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) +
                    "\nint* lean_link_kept;  // escapes: GCC may not elide the allocation\n"
                    "extern \"C\" void lean_link_needs_new(void* const* args) {\n"
                    "  lean_link_kept = new int(41);\n  *static_cast<int*>(args[0]) = *lean_link_kept + 1;\n}\n";
  std::vector<LoadedKernel> needsNew;
  setenv("DYNAMO_LOGS", "fusion", 1);
  const std::string log = stderrOf([&] { needsNew = compileKernels({{src, "lean_link_needs_new", {}}}); });
  unsetenv("DYNAMO_LOGS");
  REQUIRE(needsNew[0].symbol);
  if (leanOn) {  // DYNAMO_LOGS=fusion says which symbol the lean link missed and that it fell back
    CHECK(log.find("[dynamo fusion] kernel lean_link_needs_new: ") != std::string::npos);
    CHECK(log.find("undefined reference to") != std::string::npos);
    CHECK(log.find("; compiling again with the default link\n") != std::string::npos);
  }
  CHECK_FALSE(needsNew[0].cacheHit);
  int out = 0;
  void* args[] = {&out};
  reinterpret_cast<void (*)(void* const*)>(needsNew[0].symbol)(args);
  CHECK(out == 42);
  if (leanOn) CHECK(fileBytes(needsNew[0].path).find("libstdc++.so") != std::string::npos);
}

TEST_CASE("softmax is one kernel with its reductions in registers") {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({3, 5}));
  auto s = b.callFunction(core::Target::atenOp("aten::_softmax"), {N(x), core::Arg::integer(-1), core::Arg::boolean(false)}, {}, meta({3, 5}));
  b.output(N(s));
  Program p = lowerGraph(b.build());
  REQUIRE(p.kernels.size() == 1);
  const Kernel& k = p.kernels[0];
  CHECK(k.outerSizes == std::vector<int64_t>{3});
  CHECK(k.innerSizes == std::vector<int64_t>{5});
  REQUIRE(k.stages.size() == 3);
  CHECK(k.stages[0].kind == Stage::Kind::kReduce);
  CHECK(k.stages[0].buffer == -1);  // kept in a register
  CHECK(k.stages[2].kind == Stage::Kind::kStoreInner);
  std::string cuda = emitCuda(k, p);
  CHECK(cuda.find("__global__ void " + k.name) != std::string::npos);
  CHECK(cuda.find("DYN_HOST_SHIM") != std::string::npos);
}

TEST_CASE("unsupported ops are extern steps and fusion does not cross a mutation") {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({4}));
  auto e = b.callFunction(core::Target::atenOp("aten::exp"), {N(x)}, {}, meta({4}));
  auto c = b.callFunction(core::Target::atenOp("aten::cumsum"), {N(e), core::Arg::integer(0)}, {}, meta({4}));
  auto m = b.callFunction(core::Target::atenOp("aten::add_.Tensor"), {N(x), core::Arg::integer(1)}, {}, meta({4}));
  auto r = b.callFunction(core::Target::atenOp("aten::mul.Tensor"), {N(c), N(x)}, {}, meta({4}));
  b.output(core::Arg::tuple({N(r), N(m)}));
  Program p = lowerGraph(b.build());
  REQUIRE(p.externs.size() == 2);
  CHECK(p.externs[0].first == "cumsum");
  CHECK(p.externs[0].second == "no lowering for torch.ops.aten.cumsum.default");
  CHECK(p.externs[1].first == "add_");
  // exp kernel, cumsum, add_, mul kernel: the mul reads x after the in-place add
  REQUIRE(p.steps.size() == 4);
  CHECK(p.steps[0].isKernel);
  CHECK_FALSE(p.steps[1].isKernel);
  CHECK_FALSE(p.steps[2].isKernel);
  CHECK(p.steps[3].isKernel);
}

TEST_CASE("intermediates with several users share an arena planned by liveness") {
  core::GraphBuilder b;
  auto x = b.placeholder("x", meta({64}));
  core::NodeRef v = x;
  // a long expression used twice is materialised (not recomputed) into the arena
  for (int i = 0; i < 12; ++i) {
    v = b.callFunction(core::Target::atenOp("aten::sigmoid"), {N(v)}, {}, meta({64}));
    v = b.callFunction(core::Target::atenOp("aten::mul.Tensor"), {N(v), core::Arg::floating(1.5)}, {}, meta({64}));
  }
  auto s1 = b.callFunction(core::Target::atenOp("aten::cumsum"), {N(v), core::Arg::integer(0)}, {}, meta({64}));
  auto a = b.callFunction(core::Target::atenOp("aten::add.Tensor"), {N(v), N(s1)}, {}, meta({64}));
  auto c = b.callFunction(core::Target::atenOp("aten::mul.Tensor"), {N(v), N(a)}, {}, meta({64}));
  b.output(N(c));
  Program p = lowerGraph(b.build());
  CHECK(p.externs.size() == 1);
  bool escaped = false;
  for (const Buffer& buf : p.buffers) escaped = escaped || (buf.node == "mul_11" && buf.kind == BufferKind::kOutput);
  CHECK(escaped);  // read by the extern cumsum: it escapes, never in the arena
}

TEST_CASE("the CUBIN reader rejects what is not a 64-bit ELF") {
  CubinInfo info = readCubin("garbage");
  CHECK(info.machine == 0);
  CHECK(info.functions.empty());
}

TEST_CASE("every lowered op of lowered_ops.def has a kind") {
  for (const LoweredOpInfo& op : loweredOps()) {
    std::string kind = op.kind;
    CHECK((kind == "pointwise" || kind == "reduction" || kind == "composite" || kind == "view" ||
           kind == "extern" || kind == "matmul"));
  }
}
