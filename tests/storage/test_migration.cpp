// Schema migration: a version 1 file (written through the test hook) is read as is, and upgraded
// in place by the next writer, keeping every row and gaining the version 2 columns and indexes.
#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_store.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using dynamo::storage::testing::ScratchDir;

namespace {

// Writes a version 1 store with one run, a frame, a compile and a graph break.
void writeVersion1(const std::string& path) {
  WriterOptions options;
  options.schemaVersionForTesting = 1;
  RunRecord run;
  run.argv = {"old.py"};
  run.rank = 5;  // not stored: version 1 has no rank column
  auto writer = TraceWriter::open(path, run, options);
  REQUIRE(writer->schemaVersion() == 1);
  RowId frame = writer->recordFrame({0, 0, "old.py", 3, "f"});
  CompileRecord c;
  c.frameId = frame;
  c.status = "graph_break";
  c.reason = "first call";
  RowId compile = writer->recordCompile(c);
  GraphBreakRecord b;
  b.compileId = compile;
  b.kind = "print";
  b.location = {"old.py", 4, "print(x)"};
  writer->recordGraphBreak(b);
  writer->close();
}

std::int64_t columnCount(const std::string& path, const char* table, const char* column) {
  return testing::rawQueryInt(path, std::string("SELECT count(*) FROM pragma_table_info('") +
                                        table + "') WHERE name = '" + column + "'");
}

std::int64_t indexCount(const std::string& path) {
  return testing::rawQueryInt(
      path, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL");
}

}  // namespace

TEST_CASE("a version 1 file has the version 1 schema") {
  ScratchDir dir;
  std::string path = dir.file("v1.db");
  writeVersion1(path);
  CHECK(testing::rawQueryInt(path, "PRAGMA user_version") == 1);
  CHECK(columnCount(path, "runs", "rank") == 0);
  CHECK(indexCount(path) == 0);
}

TEST_CASE("the reader reads a version 1 file without changing it") {
  ScratchDir dir;
  std::string path = dir.file("v1.db");
  writeVersion1(path);
  std::string before = testing::readFile(path);
  auto reader = TraceReader::open(path);
  CHECK(reader->schemaVersion() == 1);
  std::vector<RunRecord> runs = reader->runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].rank == -1);  // the version 2 default
  CHECK(reader->graphBreakGroups().size() == 1);
  reader.reset();
  CHECK(testing::readFile(path) == before);
}

TEST_CASE("a writer upgrades a version 1 file to the current schema, keeping its rows") {
  ScratchDir dir;
  std::string path = dir.file("v1.db");
  writeVersion1(path);
  RunRecord run;
  run.rank = 2;
  run.worldSize = 8;
  auto writer = TraceWriter::open(path, run);
  CHECK(writer->schemaVersion() == kSchemaVersion);
  writer->recordFrame({0, 0, "new.py", 1, "g"});
  writer->close();

  CHECK(testing::rawQueryInt(path, "PRAGMA user_version") == kSchemaVersion);
  CHECK(columnCount(path, "runs", "rank") == 1);
  CHECK(columnCount(path, "runs", "world_size") == 1);
  CHECK(indexCount(path) == 11);

  auto reader = TraceReader::open(path);
  std::vector<RunRecord> runs = reader->runs();
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].argv == std::vector<std::string>{"old.py"});
  CHECK(runs[0].rank == -1);
  CHECK(runs[1].rank == 2);
  CHECK(runs[1].worldSize == 8);
  std::vector<FrameRecord> oldFrames = reader->frames(runs[0].id);
  REQUIRE(oldFrames.size() == 1);
  CHECK(oldFrames[0].name == "f");
  std::vector<CompileRecord> compiles = reader->compilesOfFrame(oldFrames[0].id);
  REQUIRE(compiles.size() == 1);
  std::vector<GraphBreakRecord> breaks = reader->graphBreaks(compiles[0].id);
  REQUIRE(breaks.size() == 1);
  CHECK(breaks[0].location.sourceLine == "print(x)");
  CHECK(reader->frames(runs[1].id).size() == 1);
  CHECK(reader->integrityCheck() == "ok");
}

TEST_CASE("upgradeTraceStore upgrades in place and reports the old version") {
  ScratchDir dir;
  std::string path = dir.file("v1.db");
  writeVersion1(path);
  CHECK(upgradeTraceStore(path) == 1);
  CHECK(testing::rawQueryInt(path, "PRAGMA user_version") == kSchemaVersion);
  CHECK(upgradeTraceStore(path) == kSchemaVersion);  // nothing left to do
  CHECK(TraceReader::open(path)->counts().graphBreaks == 1);
}

TEST_CASE("every schema version has a described migration") {
  std::string text = describeMigrations();
  for (int v = 1; v <= kSchemaVersion; ++v)
    CHECK(text.find(std::to_string(v) + ": ") != std::string::npos);
}
