// The plain-text reports behind `dynamo-trace`, pinned with volatile fields masked.
#include "dynamo/explain/aot_report.h"
#include "dynamo/explain/explain_report.h"
#include "dynamo/explain/trace_report.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using namespace dynamo::explain;
using dynamo::storage::testing::ScratchDir;

namespace {
std::string writeSample(const ScratchDir& dir) {
  std::string path = dir.file("report.db");
  RunRecord run;
  run.argv = {"train.py", "--fast"};
  run.pythonVersion = "3.11.2";
  run.torchVersion = "1.13.1";
  run.dynamoVersion = "0.1.0";
  auto writer = TraceWriter::open(path, run);
  RowId frame = writer->recordFrame({0, 0, "model.py", 10, "forward"});
  CompileRecord c;
  c.frameId = frame;
  c.status = "graph_break";
  c.reason = "first call";
  c.durationUs = 2500;
  c.phases = {{"trace", 2000}};
  RowId compile = writer->recordCompile(c);
  for (int i = 0; i < 2; ++i) {
    GraphBreakRecord b;
    b.compileId = compile;
    b.kind = "data_dependent_branch";
    b.location = {"model.py", 12, "if x.sum() < 0:"};
    b.explanation = "the branch depends on a tensor value";
    b.hints = {"use torch.where"};
    writer->recordGraphBreak(b);
  }
  GuardFailureRecord f;
  f.compileId = compile;
  f.frameId = frame;
  f.reason = "tensor 'x' size mismatch at index 0. expected 4, actual 8";
  writer->recordGuardFailure(f);
  writer->close();
  return path;
}
}  // namespace

TEST_CASE("the graph-break report groups breaks and shows why and how to fix") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeSample(dir));
  CHECK(renderGraphBreaks(*reader, {true}) ==
        "2 graph breaks at 1 location\n"
        "\n"
        "2 x data_dependent_branch at model.py:12\n"
        "   |  if x.sum() < 0:\n"
        "  = why: the branch depends on a tensor value\n"
        "  = hint: use torch.where\n");
}

TEST_CASE("the summary names the run, its versions and its row counts") {
  ScratchDir dir;
  std::string path = writeSample(dir);
  auto reader = TraceReader::open(path);
  std::string text = renderSummary(*reader, {true});
  std::string runId = std::to_string(reader->runs()[0].id);
  CHECK(text == "trace store " + path + " (schema version 3)\n\n"
                "run " + runId + ": pid <masked>, started <masked>, ended <masked>\n"
                "  command: train.py --fast\n"
                "  host: <masked>  python 3.11.2  torch 1.13.1  dynamo 0.1.0\n"
                "  frames 1, compiles 1, graphs 0, graph breaks 2, guards 0, guard failures 1, "
                "code 0, artifacts 0\n");
}

TEST_CASE("the compile and guard-failure reports list every entry") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeSample(dir));
  std::string compiles = renderCompiles(*reader, {true});
  CHECK(compiles.find("  forward (model.py:10)\n    #0 graph_break in <masked>: first call\n"
                      "       trace <masked>\n") != std::string::npos);
  std::string failures = renderGuardFailures(*reader, {true});
  CHECK(failures.find("1 guard failure\n<masked> forward cache entry ") == 0);
  CHECK(failures.find("size mismatch at index 0") != std::string::npos);
  CHECK(reportCommands().size() == 6);
}

// ---- AOT records (aot_report.h) ------------------------------------------------------------

namespace {
// A compile with two graphs under aot_eager: graph 0 trained (joint, forward, backward), graph 1
// fell back; then a compile of another frame whose record is not JSON.
std::string writeAotSample(const ScratchDir& dir, RowId& compileId) {
  std::string path = dir.file("aot.db");
  RunRecord run;
  run.argv = {"train.py"};
  auto writer = TraceWriter::open(path, run);
  RowId frame = writer->recordFrame({0, 0, "/src/model.py", 10, "forward"});
  CompileRecord c;
  c.frameId = frame;
  c.status = "ok";
  c.reason = "first call";
  RowId compile = compileId = writer->recordCompile(c);
  for (int i = 0; i < 2; ++i) {
    GraphRecord g;
    g.compileId = compile;
    g.index = i;
    g.serialized = "{}";
    writer->recordGraph(g);
  }
  auto artifact = [&](RowId cid, const std::string& name, const std::string& data) {
    ArtifactRecord a;
    a.compileId = cid;
    a.name = name;
    a.mediaType = "application/json";
    a.data = data;
    writer->recordArtifact(a);
  };
  const std::string graph3 =  // 2 placeholders, 1 call, the output: 4 nodes, 1 op
      R"({"format":"dynamo.graph","version":1,"nodes":[{"op":"placeholder","name":"a"},)"
      R"({"op":"placeholder","name":"b"},{"op":"call_function","name":"mul"},{"op":"output","name":"output"}]})";
  artifact(compile, "dynamo.aot",
           R"({"backend": "aot_eager", "bytes_saved": 4096, "fallback": null, "file": "/src/model.py", )"
           R"("function": "forward", "line": 10, "mutated_inputs": ["self.bn.running_mean"], )"
           R"("partition_mode": "min_cut", "phases_ms": {"compile_forward": 0.5, "import": 2.0, )"
           R"("partition": 1.25, "trace": 30.0}, "recomputed": ["relu"], "saved": ["primals_1"], )"
           R"("summary": "1 saved (4096 bytes), 1 recomputed", "training": true})");
  artifact(compile, "dynamo.aot.joint", graph3);
  artifact(compile, "dynamo.aot.forward", graph3);
  artifact(compile, "dynamo.aot.backward", R"({"nodes":[{"op":"output","name":"output"}]})");
  artifact(compile, "dynamo.dynamic_shapes", "{}");  // another component's: ignored
  artifact(compile, "dynamo.aot",
           R"({"backend": "aot_eager", "fallback": "graph output 0 aliases input 'x'", )"
           R"("partition_mode": "min_cut", "phases_ms": {}})");
  RowId other = writer->recordFrame({0, 0, "/src/model.py", 30, "head"});
  c.frameId = other;
  RowId second = writer->recordCompile(c);
  artifact(second, "dynamo.aot", "not json");
  writer->close();
  return path;
}
}  // namespace

TEST_CASE("AOT records are read per compile, one per graph, in artifact order") {
  ScratchDir dir;
  RowId compile = 0;
  auto reader = TraceReader::open(writeAotSample(dir, compile));
  std::vector<GraphAot> records = aotRecordsOfCompile(*reader, compile);
  REQUIRE(records.size() == 2);
  const GraphAot& a = records[0];
  CHECK(a.backend == "aot_eager");
  CHECK(a.training);
  CHECK(a.fallback.empty());
  CHECK(a.partitioned);
  CHECK(a.saved == std::vector<std::string>{"primals_1"});
  CHECK(a.recomputed == std::vector<std::string>{"relu"});
  CHECK(a.bytesSaved == 4096);
  REQUIRE(a.joint.has_value());
  CHECK((a.joint->nodes == 4 && a.joint->ops == 1));
  CHECK((a.backward->nodes == 1 && a.backward->ops == 0));
  // Phases in pipeline order, not the JSON's alphabetical one; milliseconds -> microseconds.
  using Phase = std::pair<std::string, std::int64_t>;
  CHECK(a.phasesUs == std::vector<Phase>{{"trace", 30000}, {"import", 2000}, {"partition", 1250},
                                         {"compile_forward", 500}});
  CHECK(a.compileUs() == 33750);
  CHECK(a.graphs.size() == 3);  // kept for aot-graph
  CHECK(records[1].fallback == "graph output 0 aliases input 'x'");
  CHECK((!records[1].joint && !records[1].forward && !records[1].partitioned));
}

TEST_CASE("dynamo-trace aot lists every AOT compile with its partition, or the fallback") {
  ScratchDir dir;
  RowId compile = 0;
  auto reader = TraceReader::open(writeAotSample(dir, compile));
  CHECK(renderAot(*reader, {true}) ==
        "run " + std::to_string(reader->runs()[0].id) + "\n"
        "  forward (model.py:10)\n"
        "    compile #0 (id <masked>), graph 0: aot_eager (training) in <masked>\n"
        "       graphs: joint 4 nodes (1 op), forward 4 nodes (1 op), backward 1 node (0 ops)\n"
        "       partition (min_cut): 1 saved (4096 bytes), 1 recomputed\n"
        "         saved: primals_1\n"
        "         recomputed: relu\n"
        "       mutated inputs: self.bn.running_mean\n"
        "       phases: trace <masked>, import <masked>, partition <masked>, compile_forward <masked>\n"
        "    compile #0 (id <masked>), graph 1: aot_eager runs it on the eager runner: graph output 0 "
        "aliases input 'x'\n"
        "  head (model.py:30)\n"
        "    compile #0 (id <masked>), graph 0: an AOT backend runs it on the eager runner: (the dynamo.aot artifact "
        "is not a JSON object)\n");
}

TEST_CASE("the explainer's report attaches the k-th AOT record to the k-th graph") {
  ScratchDir dir;
  RowId compile = 0;
  auto reader = TraceReader::open(writeAotSample(dir, compile));
  ExplainReport report = buildExplainReport(*reader);
  const FunctionReport& f = report.runs.at(0).functions.at(0);
  REQUIRE(f.graphs.size() == 2);
  REQUIRE((f.graphs[0].aot && f.graphs[1].aot));
  CHECK(f.graphs[0].aot->training);
  CHECK(f.graphs[1].aot->fallback == "graph output 0 aliases input 'x'");
  RenderOptions masked;
  masked.masked = true;
  CHECK(aotLine(*f.graphs[0].aot, masked) ==
        "aot_eager (training): joint 4 nodes, forward 4 nodes, backward 1 node; min_cut partition: "
        "1 saved (4096 bytes), 1 recomputed; <time>");
  std::string json = renderExplainJson(report, masked);
  CHECK(json.find("\"bytes_saved\": 4096") != std::string::npos);
  CHECK(json.find("\"saved_values\": 1") != std::string::npos);
}
