// The explainer's model and renderers over a store written with TraceWriter: breaks grouped by
// (kind, file, line), occurrences = compiles + runtime hits, op counts, policy messages.
#include <string>

#include "dynamo/common/error.h"
#include "dynamo/explain/explain_report.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "scratch_dir.h"

using namespace dynamo::explain;
using namespace dynamo::storage;
using dynamo::explain::testing::ScratchDir;

namespace {

constexpr const char* kGraph =
    R"({"format":"dynamo.graph","version":1,"nodes":[)"
    R"({"op":"placeholder","name":"x"},)"
    R"({"op":"call_function","name":"mul","target":"operator.mul","args":[{"node":"x"},2]},)"
    R"({"op":"call_method","name":"sum","target":"sum","args":[{"node":"mul"}]},)"
    R"({"op":"call_function","name":"mul_1","target":"operator.mul","args":[{"node":"sum"},2]},)"
    R"({"op":"output","name":"output","args":[{"node":"mul_1"}]}]})";

GraphBreakRecord branchBreak(RowId compile, std::vector<std::string> stack) {
  GraphBreakRecord b;
  b.compileId = compile;
  b.kind = "data-dependent-branch";
  b.location = {"/src/model.py", 12, "if y.sum() > 0:"};
  b.explanation = "branch on a tensor value";
  b.hints = {"use torch.where"};
  b.userStack = std::move(stack);
  return b;
}

// step (graph_break, entry hit 999 times) called from train (skipped, same break nested).
std::string writeLoopStore(const ScratchDir& dir, bool withHits = true) {
  std::string path = dir.file("explain.db");
  RunRecord run;
  run.argv = {"/src/train.py"};
  auto w = TraceWriter::open(path, run);
  RowId train = w->recordFrame({0, 0, "/src/model.py", 20, "train"});
  CompileRecord skipped;
  skipped.frameId = train;
  skipped.status = "skipped";
  skipped.reason = "graph break inside a loop";
  RowId c0 = w->recordCompile(skipped);
  w->recordGraphBreak(branchBreak(c0, {"/src/model.py:22: x = step(x)", "/src/model.py:12: if y.sum() > 0:"}));
  RowId step = w->recordFrame({0, 0, "/src/model.py", 10, "step"});
  CompileRecord c;
  c.frameId = step;
  c.status = "graph_break";
  c.reason = "first call";
  c.durationUs = 1500;
  c.phases = {{"capture", 1000}, {"backend", 500}};
  RowId c1 = w->recordCompile(c);
  GraphRecord g;
  g.compileId = c1;
  g.serialized = kGraph;
  g.numNodes = 5;
  w->recordGraph(g);
  w->recordGraphBreak(branchBreak(c1, {"/src/model.py:12: if y.sum() > 0:"}));
  w->recordGuard({0, 0, c1, "TENSOR_MATCH", "x", "x", {"/src/model.py", 10, "def step(x):"}});
  if (withHits)
    w->recordArtifact({0, 0, 0, kEntryHitsArtifact, "text/plain", std::to_string(c1) + " 999\n", 0});
  w->close();
  return path;
}

}  // namespace

TEST_CASE("a break in a loop is one group counting compiles plus runtime hits") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeLoopStore(dir));
  ExplainReport report = buildExplainReport(*reader);
  REQUIRE(report.runs.size() == 1);
  const RunExplain& run = report.runs[0];
  REQUIRE(run.hitsRecorded);
  REQUIRE(run.breaks.size() == 1);
  // step: 1 + 999 hits; train's skipped compile met the same break inlined (1): the larger sum.
  CHECK(run.breaks[0].occurrences == 1000);
  CHECK(run.breaks[0].compiles == 2);
  CHECK(run.breaks[0].userStack.size() == 2);  // the first break's stack (train's)
  CHECK(report.distinctBreaks() == 1);
  REQUIRE(run.functions.size() == 2);
  CHECK(run.functions[0].name == "train");
  CHECK(run.functions[0].breaks[0].occurrences == 1);  // never below 1
  CHECK(run.functions[0].notCompiledReason == "graph break inside a loop");
  const FunctionReport& step = run.functions[1];
  CHECK(step.guards == 1);
  CHECK(step.compileUs == 1500);
  REQUIRE(step.graphs.size() == 1);
  CHECK(step.graphs[0].ops() == 3);
  CHECK(step.graphs[0].opCounts.at("operator.mul") == 2);
  CHECK(step.graphs[0].opCounts.at("torch.Tensor.sum") == 1);
}

TEST_CASE("without the hits artifact a break counts its compiles") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeLoopStore(dir, false));
  ExplainReport report = buildExplainReport(*reader);
  CHECK_FALSE(report.runs[0].hitsRecorded);
  CHECK(report.runs[0].breaks[0].occurrences == 1);
}

TEST_CASE("op counts of a serialized graph; not JSON gives none") {
  auto counts = graphOpCounts(kGraph);
  CHECK(counts.size() == 2);
  CHECK(graphOpCounts("not json").empty());
  CHECK(graphOpCounts(R"({"nodes":[{"op":"call_module","target":"fc"}]})").at("module fc") == 1);
}

TEST_CASE("an unknown run id is a user error naming the store") {
  ScratchDir dir;
  std::string path = writeLoopStore(dir);
  auto reader = TraceReader::open(path);
  try {
    buildExplainReport(*reader, 99);
    FAIL("expected a UserError");
  } catch (const dynamo::UserError& e) {
    CHECK(e.summary() == "trace store '" + path + "' has no run 99");
    CHECK(e.hint() == "list its runs with: dynamo-trace runs " + path);
  }
}

TEST_CASE("renderers: masked text, JSON, JUnit, Markdown, SARIF") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeLoopStore(dir));
  ExplainReport report = buildExplainReport(*reader);
  RenderOptions masked{true, ""};
  std::string text = renderExplain(report, Format::kText, masked);
  CHECK(text.find("dynamo-explain: run 1 (train.py)\n") == 0);
  CHECK(text.find("  1. data-dependent-branch at model.py:12, 1000 times (met in 2 compiles)\n"
                  "       |  if y.sum() > 0:\n"
                  "     = why: branch on a tensor value\n"
                  "     = hint: use torch.where\n"
                  "     = first seen from:\n"
                  "         model.py:22: x = step(x)\n") != std::string::npos);
  CHECK(text.find("<time>") != std::string::npos);
  CHECK(text.find("1.5ms") == std::string::npos);
  CHECK(renderExplain(report, Format::kText, {false, "/src"}).find("model.py:12, 1000 times") !=
        std::string::npos);
  std::string json = renderExplain(report, Format::kJson, masked);
  CHECK(json.find("\"occurrences\": 1000") != std::string::npos);
  CHECK(json.find("\"operator.mul\": 2") != std::string::npos);
  std::string junit = renderExplain(report, Format::kJunit, masked);
  CHECK(junit.find("<testsuites>\n  <testsuite name=\"dynamo-explain: run 1 (train.py)\" "
                   "package=\"train.py\" id=\"0\" timestamp=\"1970-01-01T00:00:00\" "
                   "hostname=\"&lt;masked&gt;\" tests=\"2\" failures=\"2\"") != std::string::npos);
  CHECK(junit.find("if y.sum() &gt; 0:") != std::string::npos);
  std::string md = renderExplain(report, Format::kMarkdown, masked);
  CHECK(md.find("| 1 | data-dependent-branch | `model.py:12` | 1000 | `if y.sum() > 0:` |") !=
        std::string::npos);
  std::string sarif = renderExplain(report, Format::kSarif, masked);
  CHECK(sarif.find("\"version\": \"2.1.0\"") != std::string::npos);
  CHECK(sarif.find("\"startLine\": 12") != std::string::npos);
  CHECK(sarif.find("\"uri\": \"model.py\"") != std::string::npos);
}

TEST_CASE("policy: max breaks and fullgraph, with exact messages") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeLoopStore(dir));
  ExplainReport report = buildExplainReport(*reader);
  RenderOptions masked{true, ""};
  CHECK(checkExplainPolicy(report, {}).code == 0);
  ExplainPolicy one;
  one.maxBreaks = 1;
  CHECK(checkExplainPolicy(report, one).code == 0);
  ExplainPolicy zero;
  zero.maxBreaks = 0;
  PolicyResult r = checkExplainPolicy(report, zero, masked);
  CHECK(r.code == 1);
  CHECK(r.message == "dynamo-explain: 1 distinct graph break, more than --max-breaks 0\n");
  ExplainPolicy full;
  full.fullgraph = true;
  CHECK(checkExplainPolicy(report, full, masked).message ==
        "dynamo-explain: --fullgraph: the script has 1 distinct graph break; the first is "
        "data-dependent-branch at model.py:12: if y.sum() > 0:\n");
}

TEST_CASE("JSON writer and XML escaping") {
  JsonWriter w;
  w.beginObject().key("a").value("x\"\n").key("b").beginArray().value(1).value(true).endArray();
  w.key("c").beginObject().endObject().endObject();
  CHECK(w.str() == "{\n  \"a\": \"x\\\"\\n\",\n  \"b\": [\n    1,\n    true\n  ],\n  \"c\": {}\n}\n");
  CHECK(xmlEscape("<a & 'b'>\x01") == "&lt;a &amp; &apos;b&apos;&gt;");
  CHECK(markdownCell("a|b\nc") == "a\\|b<br>c");
}

TEST_CASE("a break in a called function counts once per call, in every report") {
  // outer inlined helper, met the branch (user stack of 2) and broke at the call; helper was
  // then compiled on its own and met it again (stack of 1). 20 calls: each entry hit 19 times.
  ScratchDir dir;
  std::string path = dir.file("callee.db");
  auto w = TraceWriter::open(path, RunRecord{});
  std::string hits;
  for (const char* name : {"outer", "helper"}) {
    RowId frame = w->recordFrame({0, 0, "/src/model.py", 10, name});
    CompileRecord c;
    c.frameId = frame;
    c.status = "graph_break";
    RowId id = w->recordCompile(c);
    std::vector<std::string> stack = {"/src/model.py:12: if y.sum() > 0:"};
    if (std::string(name) == "outer") stack.insert(stack.begin(), "/src/model.py:20: helper(x)");
    w->recordGraphBreak(branchBreak(id, stack));
    hits += std::to_string(id) + " 19\n";
  }
  w->recordArtifact({0, 0, 0, kEntryHitsArtifact, "text/plain", hits, 0});
  w->close();
  auto reader = TraceReader::open(path);
  ExplainReport report = buildExplainReport(*reader);
  REQUIRE(report.runs[0].breaks.size() == 1);
  CHECK(report.runs[0].breaks[0].occurrences == 20);
  CHECK(report.runs[0].breaks[0].compiles == 2);
  for (const FunctionReport& f : report.runs[0].functions) CHECK(f.breaks[0].occurrences == 20);
  std::vector<GraphBreakGroup> groups = reader->graphBreakGroups();  // dynamo-trace breaks
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].count == 20);
  CHECK(groups[0].records == 2);
}

TEST_CASE("a callee's break met by a skipped caller and an inlining caller counts each pass once") {
  // tests/python/scripts/explain_same_breaks.py: main (skipped: the break is in its loop) calls
  // outer 5 times, outer inlines helper and breaks at the call, helper breaks on its own. The
  // three compiles met the same 5 passes: 5, not 1 + 5 (main's and outer's chains summed).
  ScratchDir dir;
  std::string path = dir.file("chain.db");
  auto w = TraceWriter::open(path, RunRecord{});
  std::string hits;
  const std::vector<std::string> chain = {"/src/model.py:21: x = outer(x)",
                                          "/src/model.py:15: return helper(x * 3) - 1",
                                          "/src/model.py:12: if y.sum() > 0:"};
  for (const char* name : {"main", "outer", "helper"}) {
    RowId frame = w->recordFrame({0, 0, "/src/model.py", 10, name});
    CompileRecord c;
    c.frameId = frame;
    c.status = std::string(name) == "main" ? "skipped" : "graph_break";
    RowId id = w->recordCompile(c);
    size_t depth = std::string(name) == "main" ? 3 : std::string(name) == "outer" ? 2 : 1;
    w->recordGraphBreak(branchBreak(id, {chain.end() - static_cast<long>(depth), chain.end()}));
    if (c.status == "graph_break") hits += std::to_string(id) + " 4\n";
  }
  w->recordArtifact({0, 0, 0, kEntryHitsArtifact, "text/plain", hits, 0});
  w->close();
  auto reader = TraceReader::open(path);
  ExplainReport report = buildExplainReport(*reader);
  REQUIRE(report.runs[0].breaks.size() == 1);
  CHECK(report.runs[0].breaks[0].occurrences == 5);
  CHECK(report.runs[0].breaks[0].compiles == 3);
  std::vector<GraphBreakGroup> groups = reader->graphBreakGroups();  // dynamo-trace breaks
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].count == 5);
  CHECK(groups[0].records == 3);
}

TEST_CASE("BreakTally: chains of one length add up, a longer chain is within its shorter one") {
  EntryHits hits;
  hits.recorded = true;
  auto record = [&](RowId id, const char* status, std::int64_t entryHits) {
    CompileRecord c;
    c.id = id;
    c.status = status;
    hits.byCompile[id] = entryHits;
    return c;
  };
  const std::string site = "/src/model.py:12: if y.sum() > 0:";
  SECTION("two callers inline the callee, which is never compiled on its own: their sum") {
    BreakTally t;
    t.add(record(1, "graph_break", 2), branchBreak(1, {"a.py:3: helper(x)", site}), hits);
    t.add(record(2, "graph_break", 3), branchBreak(2, {"b.py:7: helper(x)", site}), hits);
    CHECK(t.occurrences() == 3 + 4);
    CHECK(t.records() == 2);
  }
  SECTION("the callee's own compiles see every caller's passes and more: the callee's") {
    BreakTally t;
    t.add(record(1, "graph_break", 2), branchBreak(1, {"a.py:3: helper(x)", site}), hits);
    t.add(record(2, "graph_break", 3), branchBreak(2, {"b.py:7: helper(x)", site}), hits);
    t.add(record(3, "graph_break", 9), branchBreak(3, {site}), hits);
    CHECK(t.occurrences() == 10);
  }
  SECTION("a skipped outer caller's pass is one of the inlining caller's") {
    BreakTally t, outer;
    t.add(record(1, "skipped", 0), branchBreak(1, {"m.py:1: outer(x)", "a.py:3: helper(x)", site}), hits);
    outer.add(record(2, "graph_break", 4), branchBreak(2, {"a.py:3: helper(x)", site}), hits);
    t.merge(outer);
    CHECK(t.occurrences() == 5);
    CHECK(t.records() == 2);
  }
  SECTION("no stack at all counts as the site's own record, and never below 1") {
    BreakTally t;
    t.add(record(1, "failed", 0), branchBreak(1, {}), hits);
    CHECK(t.occurrences() == 1);
  }
}

TEST_CASE("SARIF URIs are RFC 3986 references: file URIs or relative, percent-encoded") {
  CHECK(uriReference("model.py") == "model.py");
  CHECK(uriReference("sub dir/a#b?.py") == "sub%20dir/a%23b%3F.py");
  CHECK(uriReference("/home/me/my model/m.py") == "file:///home/me/my%20model/m.py");
  CHECK(uriReference("caf\xc3\xa9/100%.py") == "caf%C3%A9/100%25.py");
  CHECK(uriReference("c:x.py") == "c%3Ax.py");  // never read as a scheme
}

TEST_CASE("a run that did not close says so instead of advising") {
  ExplainReport report;
  report.storePath = "/tmp/t.db";
  RunExplain run;
  run.run.id = 1;
  run.run.argv = {"train.py"};
  report.runs.push_back(run);
  std::string text = renderExplain(report, Format::kText, {true, ""});
  CHECK(text ==
        "dynamo-explain: run 1 (train.py)\n"
        "the run did not finish cleanly: its process ended without closing the trace store "
        "(os._exit, a crash or a kill) or is still running, so its last records and the runtime "
        "hit counts may be missing; the counts below may be low. Rerun it to the end, or call "
        "dynamo.trace.end_run() before os._exit.\n"
        "No compile was recorded.\n");
  report.runs[0].run.endTimeUs = 5;
  CHECK(renderExplain(report, Format::kText, {true, ""}).find("--capture-all") != std::string::npos);
  CHECK(renderExplain(report, Format::kJson, {true, ""}).find("\"finished_cleanly\": true") !=
        std::string::npos);
}

TEST_CASE("the dynamo.explain() summary of a run, from the same report") {
  ScratchDir dir;
  auto reader = TraceReader::open(writeLoopStore(dir));
  ExplainReport report = buildExplainReport(*reader);
  REQUIRE(report.runs.size() == 1);
  const RunExplain& run = report.runs[0];
  // The groups know the functions whose compiles met them, first first.
  REQUIRE(run.breaks.size() == 1);
  CHECK(run.breaks[0].functions == std::vector<std::string>{"train", "step"});
  CHECK(run.functions[0].notCompiled ==
        std::vector<std::pair<std::string, std::string>>{{"skipped", "graph break inside a loop"}});
  CHECK(run.functions[1].guardKinds == std::map<std::string, std::int64_t>{{"TENSOR_MATCH", 1}});
  RenderOptions options;
  options.rootDir = "/src";
  CHECK(renderExplainSummary(run, options) ==
        "Graph Count: 1\n"
        "Graph Break Count: 1000\n"
        "Op Count: 3\n"
        "Break Reasons (1 distinct):\n"
        "  1. data-dependent-branch at model.py:12 (1000 times)\n"
        "       if y.sum() > 0:\n"
        "     why: branch on a tensor value\n"
        "     hint: use torch.where\n"
        "     user stack (first occurrence, outermost first):\n"
        "       model.py:22: x = step(x)\n"
        "       model.py:12: if y.sum() > 0:\n"
        "Not compiled: train (model.py:20) skipped: graph break inside a loop\n"
        "Ops per Graph:\n"
        "  1. step: operator.mul x2, torch.Tensor.sum x1\n"
        "Guards: 1 (TENSOR_MATCH 1)\n"
        "Compile Time: 1.500 ms (capture 1.000, guards 0.000, backend 0.500)\n");
}

TEST_CASE("parseDynamicShapes sorts a dynamic-shape record into symbols, specialisations, guards and notes") {
  DynamicShapes d = parseDynamicShapes(
      "x.size()[0] is dynamic (s0): automatic dynamic: the size changed (8 -> 16)\n"
      "y.size()[1] is 1: sizes 0 and 1 are specialised (dynamic=True not applied)\n"
      "n is dynamic (s1): automatic dynamic: the value changed (2 -> 3)\n"
      "x.size()[1] is dynamic (s2): mark_dynamic\n"
      "x.size()[1] specialised to 6: x.shape read as Python ints at m.py:5\n"
      "s0 = x.size()[0] in [2, inf] (dynamic; example 16)\n"
      "  y.size()[0] == x.size()[0] (duck sizing: equal at the first compile)\n"
      "s1 = n in [2, inf] (dynamic; example 3)\n"
      "x.size()[1] == 6  # specialised: x.shape read as Python ints at m.py:5\n"
      "Mod(n, 3) == 0  # comparison at m.py:7\n");
  REQUIRE(d.dynamic.size() == 2);  // s2 was specialised: listed as such only
  CHECK(d.dynamic[0].source == "x.size()[0]");
  CHECK(d.dynamic[0].symbol == "s0");
  CHECK(d.dynamic[0].range == "[2, inf]");
  CHECK(d.dynamic[0].why == "automatic dynamic: the size changed (8 -> 16)");
  CHECK(d.dynamic[1].source == "n");
  CHECK(d.specialised == std::vector<std::string>{"x.size()[1] specialised to 6: x.shape read as Python ints at m.py:5"});
  CHECK(d.guards == std::vector<std::string>{"y.size()[0] == x.size()[0] (duck sizing: equal at the first compile)",
                                             "Mod(n, 3) == 0  # comparison at m.py:7"});
  CHECK(d.notes == std::vector<std::string>{"y.size()[1] is 1: sizes 0 and 1 are specialised (dynamic=True not applied)"});
  CHECK(parseDynamicShapes("").empty());
}

TEST_CASE("parseDynamicShapes lists a float input as dynamic until a use specialises it") {
  DynamicShapes d = parseDynamicShapes(
      "lr is dynamic (float): automatic dynamic: the value changed (0.1 -> 0.2)\n"
      "scale is dynamic (float): automatic dynamic: the value changed (0.5 -> 0.25)\n"
      "scale specialised to 0.25: comparison at m.py:9\n");
  REQUIRE(d.dynamic.size() == 1);
  CHECK(d.dynamic[0].source == "lr");
  CHECK(d.dynamic[0].symbol == "float");
  CHECK(d.dynamic[0].range.empty());
  CHECK(d.dynamic[0].why == "automatic dynamic: the value changed (0.1 -> 0.2)");
  CHECK(d.specialised == std::vector<std::string>{"scale specialised to 0.25: comparison at m.py:9"});
}

TEST_CASE("readAotSizeCompiles reads a compile's per-signature AOT compiles in id order") {
  auto row = [](RowId id, std::string name, std::string data) {
    ArtifactRecord a;
    a.id = id;
    a.compileId = 7;
    a.name = std::move(name);
    a.data = std::move(data);
    return a;
  };
  std::vector<ArtifactRecord> rows = {
      row(3, "dynamo.aot_per_size",
          R"({"backend":"aot_eager","when":"call","signature":["x: [8, 3]","w: [2, 3]"],"compile_ms":1.5,)"
          R"("aot":{"fallback":"graph input 'n' is an int"}})"),
      row(1, "dynamo.aot", R"({"backend":"aot_eager"})"),
      row(2, "dynamo.aot_per_size",
          R"({"backend":"aot_eager","when":"compile","signature":["x: [6, 3]","w: [2, 3]"],"compile_ms":0.25,"aot":null})"),
      row(4, "dynamo.aot_per_size", "not json"),
  };
  std::vector<AotSizeCompile> c = readAotSizeCompiles(rows);
  REQUIRE(c.size() == 2);
  CHECK(c[0].when == "compile");
  CHECK(c[0].signature == std::vector<std::string>{"x: [6, 3]", "w: [2, 3]"});
  CHECK(c[0].compileUs == 250);
  CHECK(c[0].fallback.empty());
  CHECK(c[1].when == "call");
  CHECK(c[1].backend == "aot_eager");
  CHECK(c[1].fallback == "graph input 'n' is an int");
  // Only what differs between the compiles is the signature worth showing.
  CHECK(varyingSignatures(c) == std::vector<std::vector<std::string>>{{"x: [6, 3]"}, {"x: [8, 3]"}});
}

TEST_CASE("readAotSizeCompiles reads the fused backend's lowerings with their kernels; older rows have none") {
  auto row = [](RowId id, std::string data) {
    ArtifactRecord a;
    a.id = id;
    a.compileId = 7;
    a.name = "dynamo.aot_per_size";
    a.data = std::move(data);
    return a;
  };
  std::vector<ArtifactRecord> rows = {
      // As written before the lowerings carried their kernels (and by the AOT backends).
      row(1, R"({"backend":"fused","when":"compile","signature":["x: [6, 3]"],"compile_ms":900,"aot":null})"),
      row(2, R"({"backend":"fused","when":"call","signature":["x: [8, 3]"],"compile_ms":4.5,"aot":null,)"
             R"("lowering":1,"reason":"new input signature","symbols":["s0=8"],"lower_ms":3.25,"kernels":[)"
             R"({"name":"k0_relu","code_id":41,"reused":true,"cache_hit":true,"compile_ms":0},)"
             R"({"name":"k1_sum","code_id":57,"reused":false,"cache_hit":false,"compile_ms":812.5}]})"),
      row(3, R"({"backend":"fused","when":"call","signature":["x: [9, 3]"],"compile_ms":2,"aot":null,"lowering":2,)"
             R"("reason":"new input signature","symbols":["s0=9"],"lower_ms":1,"kernels":[],)"
             R"("fallback":"node 'cumsum' did not run on meta tensors: no meta kernel"})"),
  };
  std::vector<AotSizeCompile> c = readAotSizeCompiles(rows);
  REQUIRE(c.size() == 3);
  CHECK(c[0].lowering == -1);
  CHECK(c[0].kernels.empty());
  CHECK(c[0].reason.empty());
  CHECK(c[1].lowering == 1);
  CHECK(c[1].reason == "new input signature");
  CHECK(c[1].symbols == std::vector<std::string>{"s0=8"});
  CHECK(c[1].lowerUs == 3250);
  REQUIRE(c[1].kernels.size() == 2);
  CHECK(c[1].kernels[0].name == "k0_relu");
  CHECK(c[1].kernels[0].codeId == 41);
  CHECK(c[1].kernels[0].reused);
  CHECK_FALSE(c[1].kernels[1].reused);
  CHECK(c[1].kernels[1].compileUs == 812500);
  CHECK(c[1].reusedKernels() == 1);
  CHECK(c[2].fallback == "node 'cumsum' did not run on meta tensors: no meta kernel");
  RenderOptions masked;
  masked.masked = true;
  CHECK(sizeLoweringLine(c[1], masked) ==
        "lowering #1 at s0=8 (new input signature): 1 kernel new, 1 reused (family hit); lowering <time>, total <time>");
  CHECK(sizeLoweringLine(c[2], masked) ==
        "lowering #2 at s0=9 (new input signature): runs on the eager runner: node 'cumsum' did not run on meta "
        "tensors: no meta kernel");
}
