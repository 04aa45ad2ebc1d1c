// Schema migration: a version 1 file (written through the test hook) and a version 2 file
// recorded by the schema-v2 build (data/v2_recorded.db, from data/v2_recorded.py) are read as
// they are, and upgraded in place by the next writer (the one ordered list of migrations in
// trace_store.cpp), keeping every row and gaining the later columns, indexes and tables.
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
  CHECK(indexCount(path) == 8);  // v2's 11, less the 3 by-run ones v3 drops

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

namespace {

// A copy of data/v2_recorded.db: a run of data/v2_recorded.py recorded by the Python recorder of
// schema v2 (6 compiles of f and its resume function, 2 recompiles, 4 guard failures as text,
// the "dynamo.entry_hits" artifact).
std::string copyV2(const ScratchDir& dir) {
  std::string path = dir.file("v2.db");
  testing::writeFile(path, testing::readFile(std::string(DYNAMO_STORAGE_TEST_DATA) +
                                             "/v2_recorded.db"));
  return path;
}

}  // namespace

TEST_CASE("a recorded version 2 store is read as it is, without changing the file") {
  ScratchDir dir;
  std::string path = copyV2(dir);
  std::string before = testing::readFile(path);
  {
    auto reader = TraceReader::open(path);
    CHECK(reader->schemaVersion() == 2);
    std::vector<RunRecord> runs = reader->runs();
    REQUIRE(runs.size() == 1);
    CHECK(reader->compilesOfRun(runs[0].id).size() == 6);
    std::vector<GuardFailureRecord> failures = reader->guardFailures(runs[0].id);
    REQUIRE(failures.size() == 4);
    CHECK(failures[0].reason ==
          "tensor 'x' size mismatch at dim 0: expected 2, got 3 (guard created at "
          "/tmp/pl/v2_script.py:9: y = x * n)");
    CHECK(failures[0].guardKind.empty());  // v2 has the text only
    CHECK(failures[0].causedCompileId == 0);
    EntryHits hits = reader->entryHits(runs[0].id);  // from the v2 artifact
    CHECK(hits.recorded);
    CHECK(hits.byCompile.size() == 3);
    CHECK(reader->graphBreaks(reader->compilesOfRun(runs[0].id)[0].id).at(0).detail.empty());
  }
  CHECK(testing::readFile(path) == before);
  CHECK(testing::rawQueryInt(path, "PRAGMA user_version") == 2);
}

TEST_CASE("a writer migrates a recorded version 2 store to version 3, keeping its rows") {
  ScratchDir dir;
  std::string path = copyV2(dir);
  auto writer = TraceWriter::open(path, RunRecord{});
  REQUIRE(writer->schemaVersion() == kSchemaVersion);
  RowId frame = writer->recordFrame({0, 0, "new.py", 1, "g"});
  CompileRecord c;
  c.frameId = frame;
  c.status = "ok";
  RowId compile = writer->recordCompile(c);
  GuardFailureRecord f;
  f.compileId = compile;
  f.frameId = frame;
  f.reason = "'n' changed: expected 2, got 3";
  f.guardKind = "EQUALS_MATCH";
  f.guardSource = "n";
  f.property = "value";
  f.expected = "2";
  f.seen = "3";
  f.location = {"new.py", 2, "y = x * n"};
  f.causedCompileId = compile;
  writer->recordGuardFailure(f);
  writer->recordCacheEntryHits({0, 0, compile, 41, 0});
  writer->close();

  CHECK(testing::rawQueryInt(path, "PRAGMA user_version") == 3);
  CHECK(columnCount(path, "graph_breaks", "detail") == 1);
  CHECK(columnCount(path, "guard_failures", "caused_compile_id") == 1);
  auto reader = TraceReader::open(path);
  std::vector<RunRecord> runs = reader->runs();
  REQUIRE(runs.size() == 2);
  // The old run: its rows and its artifact hits, as before.
  CHECK(reader->compilesOfRun(runs[0].id).size() == 6);
  std::vector<GuardFailureRecord> old = reader->guardFailures(runs[0].id);
  REQUIRE(old.size() == 4);
  CHECK(old[0].guardKind.empty());
  CHECK(old[0].dim == -1);  // the column's default for migrated rows
  CHECK(reader->entryHits(runs[0].id).byCompile.size() == 3);
  // The new run: failures as data, joined to the compile they caused; hits from the table.
  std::vector<GuardFailureRecord> now = reader->guardFailures(runs[1].id);
  REQUIRE(now.size() == 1);
  CHECK(now[0].guardKind == "EQUALS_MATCH");
  CHECK(now[0].expected == "2");
  CHECK(now[0].seen == "3");
  CHECK(now[0].location.line == 2);
  CHECK(now[0].causedCompileId == compile);
  EntryHits hits = reader->entryHits(runs[1].id);
  CHECK(hits.recorded);
  CHECK(hits.byCompile.at(compile) == 41);
  CHECK(reader->integrityCheck() == "ok");
}
