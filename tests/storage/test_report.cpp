// The plain-text reports behind `dynamo-trace`, pinned with volatile fields masked.
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
  CHECK(reportCommands().size() == 5);
}
