// Several processes opening one file at the same moment: writers creating a store that does not
// exist yet, writers migrating an old store, and a reader opening it meanwhile. The children are
// trace_writer_child processes held at a start barrier until all of them are ready, so that
// their opens overlap as closely as the scheduler allows. See "Concurrent opening" in
// docs/trace-store.md.
#include <sys/wait.h>

#include <set>
#include <string>
#include <vector>

#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_store.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using dynamo::storage::testing::Child;
using dynamo::storage::testing::ScratchDir;
using dynamo::storage::testing::StartBarrier;

namespace {

struct Started {
  std::vector<Child> writers;
  Child reader;
};

// Starts `writers` burst children (tags w0, w1, ...) of `rows` frames each and one read child,
// all held at `barrier`; returns once every one of them said "ready".
Started startAtBarrier(const std::string& path, int writers, int rows, StartBarrier& barrier) {
  Started s;
  for (int i = 0; i < writers; ++i)
    s.writers.push_back(testing::startChild(
        {"burst", path, "w" + std::to_string(i), std::to_string(rows), barrier.readFd()}));
  s.reader = testing::startChild({"read", path, barrier.readFd()});
  std::string line;
  for (Child& c : s.writers) {
    REQUIRE(testing::readLine(c, line));
    REQUIRE(line == "ready");
  }
  REQUIRE(testing::readLine(s.reader, line));
  REQUIRE(line == "ready");
  return s;
}

// Lets every child go, waits for all of them, and checks each exited 0. Returns the run ids the
// writers printed.
std::vector<RowId> releaseAndWait(Started& s, StartBarrier& barrier) {
  barrier.release(static_cast<int>(s.writers.size()) + 1);
  std::vector<RowId> runIds;
  for (Child& c : s.writers) {
    std::string line;
    REQUIRE(testing::readLine(c, line));
    REQUIRE(line.rfind("run ", 0) == 0);
    runIds.push_back(std::stoll(line.substr(4)));
  }
  std::string readerLine;
  REQUIRE(testing::readLine(s.reader, readerLine));
  for (Child& c : s.writers) {
    int status = testing::waitChild(c);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  int status = testing::waitChild(s.reader);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // it never saw a half-made store
  CAPTURE(readerLine);
  REQUIRE(readerLine.rfind("reads ", 0) == 0);
  CHECK(std::stoi(readerLine.substr(6)) > 0);  // it read the store, not only waited for it
  return runIds;
}

// Every writer's rows are in the file, each run is closed, and the file is sound.
void checkRuns(const std::string& path, const std::vector<RowId>& runIds, int rows) {
  auto reader = TraceReader::open(path);
  CHECK(reader->schemaVersion() == kSchemaVersion);
  CHECK(reader->integrityCheck() == "ok");
  CHECK(std::set<RowId>(runIds.begin(), runIds.end()).size() == runIds.size());
  for (RowId run : runIds) {
    StoreCounts c = reader->counts(run);
    CHECK(c.frames == rows);
    CHECK(c.compiles == rows);
    CHECK(c.guards == rows);
  }
  for (const RunRecord& r : reader->runs()) CHECK(r.endTimeUs > 0);
}

std::int64_t indexCount(const std::string& path) {
  return testing::rawQueryInt(
      path, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL");
}

}  // namespace

TEST_CASE("four writers and a reader open a file that does not exist yet at the same moment") {
  ScratchDir dir;
  std::string path = dir.file("new.db");
  const int rows = 300;
  StartBarrier barrier;
  Started started = startAtBarrier(path, 4, rows, barrier);
  std::vector<RowId> runIds = releaseAndWait(started, barrier);
  REQUIRE(runIds.size() == 4);
  checkRuns(path, runIds, rows);
  CHECK(TraceReader::open(path)->runs().size() == 4);
  CHECK(testing::rawQueryInt(path, "PRAGMA user_version") == kSchemaVersion);
  CHECK(indexCount(path) == 11);  // the schema was created once
}

TEST_CASE("three writers and a reader open a version 1 file at once: it is migrated once") {
  ScratchDir dir;
  std::string path = dir.file("old.db");
  {
    WriterOptions options;
    options.schemaVersionForTesting = 1;
    auto writer = TraceWriter::open(path, {}, options);
    REQUIRE(writer->schemaVersion() == 1);
    writer->recordFrame({0, 0, "old.py", 1, "f"});
    writer->close();
  }
  const int rows = 300;
  StartBarrier barrier;
  Started started = startAtBarrier(path, 3, rows, barrier);
  std::vector<RowId> runIds = releaseAndWait(started, barrier);
  REQUIRE(runIds.size() == 3);
  checkRuns(path, runIds, rows);
  auto reader = TraceReader::open(path);
  CHECK(reader->runs().size() == 4);
  CHECK(reader->counts().frames == 3 * rows + 1);  // the version 1 row is kept
  CHECK(testing::rawQueryInt(path, "PRAGMA user_version") == kSchemaVersion);
  CHECK(indexCount(path) == 11);
}
