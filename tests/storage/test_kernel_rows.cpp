// Kernel records (records.h, KernelRecord): a code row with the source and a "dynamo.kernel"
// artifact with the rest, written by TraceWriter::recordKernel and joined again by
// TraceReader::kernelsOfCompile.
#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using dynamo::storage::testing::ScratchDir;

namespace {
KernelRecord sampleKernel(RowId compileId, std::string name, std::string graph, int graphIndex) {
  KernelRecord k;
  k.compileId = compileId;
  k.name = std::move(name);
  k.source = "extern \"C\" void " + k.name + "(void* const* args) {}\n";
  k.graph = std::move(graph);
  k.graphIndex = graphIndex;
  k.nodes = {"mul", "add", "relu"};
  k.loops = "outer [8] inner [64]";
  k.cacheKey = "abc123";
  k.cacheHit = graphIndex == 1;
  k.compileUs = graphIndex == 1 ? 0 : 812345;
  k.lowerUs = 250;
  return k;
}
}  // namespace

TEST_CASE("kernels round trip: source in a code row, metadata in an artifact, in record order") {
  ScratchDir dir;
  const std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, RunRecord{});
  const RowId frame = writer->recordFrame({0, 0, "model.py", 3, "f"});
  CompileRecord c;
  c.frameId = frame;
  c.status = "ok";
  const RowId compile = writer->recordCompile(c);
  const RowId other = writer->recordCompile(c);
  const RowId k0 = writer->recordKernel(sampleKernel(compile, "k0_mul_add_relu", "dynamo", 0));
  const RowId k1 = writer->recordKernel(sampleKernel(compile, "k0_sum", "aot.forward", 1));
  writer->recordKernel(sampleKernel(other, "k0_other", "dynamo", 0));
  writer->close();

  auto reader = TraceReader::open(path);
  const std::vector<KernelRecord> got = reader->kernelsOfCompile(compile);
  REQUIRE(got.size() == 2);
  CHECK(got[0].id == k0);
  CHECK(got[1].id == k1);
  CHECK(got[0].name == "k0_mul_add_relu");
  CHECK(got[0].kind == CodeKind::kCppKernel);
  CHECK(got[0].source == "extern \"C\" void k0_mul_add_relu(void* const* args) {}\n");
  CHECK(got[0].graph == "dynamo");
  CHECK(got[0].graphIndex == 0);
  CHECK(got[0].nodes == std::vector<std::string>{"mul", "add", "relu"});
  CHECK(got[0].loops == "outer [8] inner [64]");
  CHECK(got[0].cacheKey == "abc123");
  CHECK_FALSE(got[0].cacheHit);
  CHECK(got[0].compileUs == 812345);
  CHECK(got[0].lowerUs == 250);
  CHECK(got[0].runUs == -1);
  CHECK(got[1].graph == "aot.forward");
  CHECK(got[1].graphIndex == 1);
  CHECK(got[1].cacheHit);
  CHECK(got[1].compileUs == 0);
  // The source is an ordinary code row too (dynamo-trace and the other readers see it).
  const std::vector<CodeRecord> code = reader->code(writer->runId(), compile);
  REQUIRE(code.size() == 2);
  CHECK(code[0].kind == CodeKind::kCppKernel);
  CHECK(code[0].name == "k0_mul_add_relu");
  REQUIRE(reader->kernelsOfCompile(other).size() == 1);
  CHECK(reader->kernelsOfCompile(other)[0].name == "k0_other");
  CHECK(reader->kernelsOfCompile(12345).empty());
}

TEST_CASE("a kernel code row whose metadata is unreadable is still listed, by name and source") {
  ScratchDir dir;
  const std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, RunRecord{});
  CompileRecord c;
  c.frameId = writer->recordFrame({0, 0, "model.py", 3, "f"});
  c.status = "ok";
  const RowId compile = writer->recordCompile(c);
  CodeRecord code{0, 0, compile, CodeKind::kCppKernel, "k0_lonely", "void k0_lonely() {}"};
  const RowId codeId = writer->recordCode(code);
  writer->recordArtifact({0, 0, compile, kKernelArtifact, "application/json", "{not json", 0});
  // Transformed bytecode is code too, but not a kernel.
  writer->recordCode({0, 0, compile, CodeKind::kTransformedBytecode, "f", "\x01\x02"});
  writer->close();

  auto reader = TraceReader::open(path);
  const std::vector<KernelRecord> got = reader->kernelsOfCompile(compile);
  REQUIRE(got.size() == 1);
  CHECK(got[0].id == codeId);
  CHECK(got[0].name == "k0_lonely");
  CHECK(got[0].source == "void k0_lonely() {}");
  CHECK(got[0].graph.empty());
  CHECK(got[0].nodes.empty());
}

TEST_CASE("a kernel's run time, written after it ran, is read into run_us and run_calls") {
  ScratchDir dir;
  const std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, RunRecord{});
  CompileRecord c;
  c.frameId = writer->recordFrame({0, 0, "model.py", 3, "f"});
  c.status = "ok";
  const RowId compile = writer->recordCompile(c);
  const RowId k0 = writer->recordKernel(sampleKernel(compile, "k0_relu", "dynamo", 0));
  writer->recordKernel(sampleKernel(compile, "k1_sum", "dynamo", 0));
  writer->recordKernelRunTime(compile, k0, 40, 5);
  writer->recordKernelRunTime(compile, k0, 37, 5);  // the last one wins
  writer->recordArtifact({0, 0, compile, kKernelRunArtifact, "application/json", "{\"code_id\": \"x\"}", 0});
  writer->close();

  auto reader = TraceReader::open(path);
  const std::vector<KernelRecord> got = reader->kernelsOfCompile(compile);
  REQUIRE(got.size() == 2);
  CHECK(got[0].runUs == 37);
  CHECK(got[0].runCalls == 5);
  CHECK(got[1].runUs == -1);  // never measured (and the unreadable record is skipped)
  CHECK(got[1].runCalls == 0);
}

TEST_CASE("a per-size lowering's kernels, written at a later call, join the compile's own (no schema change)") {
  // The fused backend lowers a dynamic entry again per input signature: its new kernels are
  // kernel rows of graph "per_size" (index: the lowering's number), written after the compile's
  // rows were persisted, with the lowering's "dynamo.aot_per_size" artifact naming them.
  ScratchDir dir;
  const std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, RunRecord{});
  CompileRecord c;
  c.frameId = writer->recordFrame({0, 0, "model.py", 3, "f"});
  c.status = "ok";
  const RowId compile = writer->recordCompile(c);
  const RowId own = writer->recordKernel(sampleKernel(compile, "k0_relu", "dynamo", 0));
  writer->persist();
  const RowId later = writer->recordKernel(sampleKernel(compile, "k0_relu", "per_size", 3));
  const std::string lowering = "{\"backend\":\"fused\",\"when\":\"call\",\"lowering\":3,\"kernels\":[{\"name\":\"k0_relu\","
                               "\"code_id\":" + std::to_string(later) + ",\"reused\":false}]}";
  writer->recordArtifact({0, 0, compile, "dynamo.aot_per_size", "application/json", lowering, 0});
  writer->persist();
  writer->close();

  auto reader = TraceReader::open(path);
  const std::vector<KernelRecord> got = reader->kernelsOfCompile(compile);
  REQUIRE(got.size() == 2);
  CHECK(got[0].id == own);
  CHECK(got[0].graph == "dynamo");
  CHECK(got[1].id == later);
  CHECK(got[1].graph == "per_size");
  CHECK(got[1].graphIndex == 3);
  CHECK(got[1].source == got[0].source);
  bool found = false;
  for (const ArtifactRecord& a : reader->artifactsOfCompile(compile)) found = found || (a.name == "dynamo.aot_per_size" && a.data == lowering);
  CHECK(found);
}
