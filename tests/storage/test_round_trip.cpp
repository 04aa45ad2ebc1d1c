// Round trips of every record type through a file, batching and flush, and write errors that
// surface at flush() without disturbing the caller.
#include <filesystem>

#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_store.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

#include <thread>

using namespace dynamo::storage;
using dynamo::storage::testing::ScratchDir;

namespace {
RunRecord sampleRun() {
  RunRecord run;
  run.argv = {"train.py", "--lr", "0.1", "quote\"and\\slash\nnewline"};
  run.pythonVersion = "3.11.2";
  run.torchVersion = "1.13.1";
  run.dynamoVersion = "0.1.0";
  run.rank = 1;
  run.worldSize = 4;
  return run;
}
}  // namespace

TEST_CASE("every record type survives a round trip through the file") {
  ScratchDir dir;
  std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, sampleRun());
  RowId runId = writer->runId();
  CHECK(writer->schemaVersion() == kSchemaVersion);

  RowId frameId = writer->recordFrame({0, 0, "model.py", 10, "Net.forward"});
  CompileRecord compile;
  compile.frameId = frameId;
  compile.attempt = 1;
  compile.status = "graph_break";
  compile.reason = "guard failed: x.size()[0] == 4";
  compile.startTimeUs = 1700000000000000;
  compile.durationUs = 1234;
  compile.phases = {{"trace", 1000}, {"codegen", 234}};
  RowId compileId = writer->recordCompile(compile);

  GraphRecord graph;
  graph.compileId = compileId;
  graph.index = 0;
  graph.format = "dynamo-graph/1";
  graph.serialized = std::string("\x00\x01\x02graph", 8);
  graph.printed = "graph(x):\n  y = add(x, 1)\n  return y";
  graph.numNodes = 3;
  graph.inputs = {"x"};
  graph.outputs = {"y"};
  RowId graphId = writer->recordGraph(graph);

  GraphBreakRecord brk;
  brk.compileId = compileId;
  brk.kind = "data_dependent_branch";
  brk.location = {"model.py", 12, "if x.sum() < 0:"};
  brk.explanation = "the branch depends on a tensor value";
  brk.hints = {"use torch.where", "or torch.cond"};
  brk.userStack = {"train.py:40 in main", "model.py:12 in forward"};
  RowId breakId = writer->recordGraphBreak(brk);

  GuardRecord guard;
  guard.compileId = compileId;
  guard.kind = "TENSOR_MATCH";
  guard.checks = "x.size() == (4, 8)";
  guard.source = "L['x']";
  guard.location = {"model.py", 11, "y = x + 1"};
  RowId guardId = writer->recordGuard(guard);

  GuardFailureRecord failure;
  failure.compileId = compileId;
  failure.frameId = frameId;
  failure.guardId = guardId;
  failure.reason = "tensor 'x' size mismatch at index 0. expected 4, actual 8";
  RowId failureId = writer->recordGuardFailure(failure);

  CodeRecord bytecode{0, 0, compileId, CodeKind::kTransformedBytecode, "forward",
                      std::string("\x97\x00\x64\x01", 4)};
  CodeRecord kernel{0, 0, compileId, CodeKind::kCudaKernel, "add_kernel", "__global__ void k(){}"};
  CodeRecord loose{0, 0, 0, CodeKind::kPythonSource, "helper", "def f(): pass"};
  writer->recordCode(bytecode);
  writer->recordCode(kernel);
  writer->recordCode(loose);
  RowId artifactId =
      writer->recordArtifact({0, 0, compileId, "profile.json", "application/json", "{}", 0});
  writer->close();

  // Ids are (run << 32) | sequence: unique in the file, allocated without waiting.
  CHECK((frameId >> 32) == runId);
  CHECK(compileId == frameId + 1);

  auto reader = TraceReader::open(path);
  CHECK(reader->schemaVersion() == kSchemaVersion);
  std::vector<RunRecord> runs = reader->runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].id == runId);
  CHECK(runs[0].argv == sampleRun().argv);
  CHECK(runs[0].pythonVersion == "3.11.2");
  CHECK(runs[0].torchVersion == "1.13.1");
  CHECK(runs[0].rank == 1);
  CHECK(runs[0].worldSize == 4);
  CHECK(runs[0].pid > 0);
  CHECK(runs[0].startTimeUs > 0);
  CHECK(runs[0].endTimeUs >= runs[0].startTimeUs);

  std::vector<FrameRecord> frames = reader->frames(runId);
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].id == frameId);
  CHECK(frames[0].file == "model.py");
  CHECK(frames[0].firstLine == 10);
  CHECK(frames[0].name == "Net.forward");

  std::vector<CompileRecord> compiles = reader->compilesOfFrame(frameId);
  REQUIRE(compiles.size() == 1);
  CHECK(compiles[0].id == compileId);
  CHECK(compiles[0].attempt == 1);
  CHECK(compiles[0].status == "graph_break");
  CHECK(compiles[0].reason == compile.reason);
  CHECK(compiles[0].startTimeUs == compile.startTimeUs);
  CHECK(compiles[0].durationUs == 1234);
  REQUIRE(compiles[0].phases.size() == 2);
  CHECK(compiles[0].phases[1].name == "codegen");
  CHECK(compiles[0].phases[1].durationUs == 234);
  CHECK(reader->compilesOfRun(runId).size() == 1);

  std::vector<GraphRecord> graphs = reader->graphs(compileId);
  REQUIRE(graphs.size() == 1);
  CHECK(graphs[0].id == graphId);
  CHECK(graphs[0].serialized == graph.serialized);
  CHECK(graphs[0].printed == graph.printed);
  CHECK(graphs[0].format == "dynamo-graph/1");
  CHECK(graphs[0].numNodes == 3);
  CHECK(graphs[0].inputs == graph.inputs);
  CHECK(graphs[0].outputs == graph.outputs);

  std::vector<GraphBreakRecord> breaks = reader->graphBreaks(compileId);
  REQUIRE(breaks.size() == 1);
  CHECK(breaks[0].id == breakId);
  CHECK(breaks[0].kind == brk.kind);
  CHECK(breaks[0].location.str() == "model.py:12");
  CHECK(breaks[0].location.sourceLine == "if x.sum() < 0:");
  CHECK(breaks[0].explanation == brk.explanation);
  CHECK(breaks[0].hints == brk.hints);
  CHECK(breaks[0].userStack == brk.userStack);

  std::vector<GuardRecord> guards = reader->guards(compileId);
  REQUIRE(guards.size() == 1);
  CHECK(guards[0].checks == guard.checks);
  CHECK(guards[0].source == "L['x']");
  CHECK(guards[0].kind == "TENSOR_MATCH");
  CHECK(guards[0].location.line == 11);
  CHECK(guards[0].location.sourceLine == "y = x + 1");

  std::vector<GuardFailureRecord> failures = reader->guardFailures(runId);
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].id == failureId);
  CHECK(failures[0].guardId == guardId);
  CHECK(failures[0].frameId == frameId);
  CHECK(failures[0].reason == failure.reason);
  CHECK(failures[0].timeUs > 0);
  CHECK(reader->guardFailuresOfCompile(compileId).size() == 1);

  std::vector<CodeRecord> code = reader->code(runId, compileId);
  REQUIRE(code.size() == 2);
  CHECK(code[0].kind == CodeKind::kTransformedBytecode);
  CHECK(code[0].content == bytecode.content);
  CHECK(code[1].kind == CodeKind::kCudaKernel);
  CHECK(code[1].content == kernel.content);
  CHECK(codeKindLanguage(code[1].kind) == "cuda");
  std::vector<CodeRecord> looseCode = reader->code(runId, 0);
  REQUIRE(looseCode.size() == 1);
  CHECK(looseCode[0].name == "helper");

  std::vector<ArtifactRecord> artifacts = reader->artifacts(runId);
  REQUIRE(artifacts.size() == 1);
  CHECK(artifacts[0].id == artifactId);
  CHECK(artifacts[0].mediaType == "application/json");
  CHECK(artifacts[0].compileId == compileId);
  std::vector<ArtifactRecord> ofCompile = reader->artifactsOfCompile(compileId);
  REQUIRE(ofCompile.size() == 1);
  CHECK(ofCompile[0].id == artifactId);
  CHECK(ofCompile[0].data == artifacts[0].data);
  CHECK(reader->artifactsOfCompile(compileId + 1000).empty());

  StoreCounts counts = reader->counts();
  CHECK(counts.runs == 1);
  CHECK(counts.code == 3);
  CHECK(reader->integrityCheck() == "ok");
}

TEST_CASE("graph breaks are grouped by kind and location, most frequent first") {
  ScratchDir dir;
  std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, {});
  RowId frame = writer->recordFrame({0, 0, "m.py", 1, "f"});
  CompileRecord c;
  c.frameId = frame;
  c.status = "graph_break";
  RowId compile = writer->recordCompile(c);
  auto addBreak = [&](const char* kind, int line, const char* why) {
    GraphBreakRecord b;
    b.compileId = compile;
    b.kind = kind;
    b.location = {"m.py", line, "src"};
    b.explanation = why;
    b.hints = {"hint"};
    writer->recordGraphBreak(b);
  };
  addBreak("print", 5, "first");
  addBreak("data_dependent_branch", 7, "a");
  addBreak("data_dependent_branch", 7, "b");
  addBreak("data_dependent_branch", 9, "c");
  writer->close();
  auto reader = TraceReader::open(path);
  std::vector<GraphBreakGroup> groups = reader->graphBreakGroups();
  REQUIRE(groups.size() == 3);
  CHECK(groups[0].kind == "data_dependent_branch");
  CHECK(groups[0].location.line == 7);
  CHECK(groups[0].count == 2);
  CHECK(groups[0].explanation == "a");  // the first break of the group
  CHECK(groups[1].count == 1);
  CHECK(groups[2].count == 1);
}

TEST_CASE("records only enqueue; flush commits them in batches") {
  ScratchDir dir;
  std::string path = dir.file("trace.db");
  WriterOptions options;
  options.batchRows = 100000;
  options.maxDelay = std::chrono::milliseconds(60000);
  auto writer = TraceWriter::open(path, {}, options);
  for (int i = 0; i < 1000; ++i) writer->recordFrame({0, 0, "f.py", i, "f"});
  {
    // Nothing reached the file yet: the batch is neither full nor old, and nobody flushed.
    auto reader = TraceReader::open(path);
    CHECK(reader->counts().frames == 0);
  }
  writer->flush();
  {
    auto reader = TraceReader::open(path);
    CHECK(reader->counts().frames == 1000);
  }
  WriterStats stats = writer->stats();
  CHECK(stats.enqueued == 1000);
  CHECK(stats.committed == 1000);
  CHECK(stats.batches == 1);  // one transaction for all 1000 rows
  CHECK(stats.dropped == 0);
  writer->close();
}

TEST_CASE("a full batch commits without a flush") {
  ScratchDir dir;
  std::string path = dir.file("trace.db");
  WriterOptions options;
  options.batchRows = 10;
  options.maxDelay = std::chrono::milliseconds(60000);
  auto writer = TraceWriter::open(path, {}, options);
  for (int i = 0; i < 10; ++i) writer->recordFrame({0, 0, "f.py", i, "f"});
  // Up to 30 s: on a loaded machine the writer thread may be scheduled late.
  for (int tries = 0; tries < 3000 && writer->stats().committed < 10; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(writer->stats().committed == 10);
  CHECK(writer->stats().batches == 1);
}

TEST_CASE("a failed batch is reported by flush, and recording goes on without throwing") {
  ScratchDir dir;
  std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, {});
  writer->recordFrame({0, 0, "ok.py", 1, "f"});
  writer->flush();
  // Another program makes every later frame insert fail.
  testing::rawExec(path, "CREATE TRIGGER refuse BEFORE INSERT ON frames "
                         "BEGIN SELECT RAISE(ABORT, 'refused by test'); END;");
  writer->recordFrame({0, 0, "bad.py", 2, "f"});
  try {
    writer->flush();
    FAIL("flush did not report the failed batch");
  } catch (const dynamo::UserError& e) {
    CHECK(e.kind() == dynamo::UserErrorKind::kTraceStore);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
    CHECK(std::string(e.what()).find("refused by test") != std::string::npos);
  }
  CHECK_NOTHROW(writer->recordFrame({0, 0, "later.py", 3, "f"}));
  CHECK(writer->stats().dropped >= 2);
  CHECK_THROWS_AS(writer->close(), dynamo::UserError);
  CHECK_THROWS_AS(writer->recordFrame({0, 0, "x.py", 4, "f"}), dynamo::UserError);
  auto reader = TraceReader::open(path);
  CHECK(reader->counts().frames == 1);
}

TEST_CASE("records from many threads all arrive with distinct ids") {
  ScratchDir dir;
  std::string path = dir.file("trace.db");
  auto writer = TraceWriter::open(path, {});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&writer, t] {
      for (int i = 0; i < 500; ++i) writer->recordFrame({0, 0, "t.py", t * 1000 + i, "f"});
    });
  for (std::thread& t : threads) t.join();
  writer->close();
  auto reader = TraceReader::open(path);
  CHECK(reader->counts().frames == 2000);
}

TEST_CASE("code kinds round trip through their stored names") {
  for (CodeKind kind : allCodeKinds()) CHECK(codeKindFromName(codeKindName(kind)) == kind);
  CHECK_FALSE(codeKindFromName("no_such_kind").has_value());
}

TEST_CASE("the WAL stays bounded: the writer thread checkpoints while flushes commit") {
  ScratchDir dir;
  std::string path = dir.file("wal.db");
  auto writer = TraceWriter::open(path, {});
  std::string payload(100 * 1024, 'w');
  // 120 MB in 1200 commits, each by flush() on this thread, as fast as the disk takes them (far
  // more than compiles write). SQLite's automatic checkpoint is off on the writer's connection,
  // so only the writer's own checkpoints keep the WAL from holding all 120 MB: the writer
  // thread's passes, and the committing thread's once the WAL holds kWalLimitPages, which waits
  // for a pass of the writer thread that is running (it once met SQLITE_BUSY and committed on:
  // 30 to 105 MB under load). The WAL file keeps the largest size it reached.
  for (int i = 0; i < 1200; ++i) {
    writer->recordArtifact({0, 0, 0, "blob", "application/octet-stream", payload, 0});
    writer->flush();
  }
  // The documented bound: kWalLimitPages pages plus one commit's. One commit here writes 27
  // pages (the blob's 26 overflow pages and the row's leaf); 64 leaves room for B-tree splits.
  constexpr std::uintmax_t kPage = 4096, kFrame = kPage + 24, kWalHeader = 32, kCommitPages = 64;
  auto walBytes = std::filesystem::file_size(path + "-wal");
  INFO("WAL file: " << walBytes << " bytes");
  CHECK(walBytes <= kWalHeader + (TraceWriter::kWalLimitPages + kCommitPages) * kFrame);
  writer->close();
  auto reader = TraceReader::open(path);
  CHECK(reader->counts().artifacts == 1200);
  CHECK(reader->integrityCheck() == "ok");
}
