// Several processes opening one file at the same moment: writers creating a store that does not
// exist yet, writers migrating an old store, and a reader opening it meanwhile; then a reader
// beside a live writer, and a file left mid-change by a writer that stopped. The children are
// trace_writer_child processes held at a start barrier until all of them are ready, so that
// their opens overlap as closely as the scheduler allows. See "Concurrent opening" in
// docs/trace-store.md.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

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
  CHECK(indexCount(path) == 8);  // the schema was created once
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
  CHECK(indexCount(path) == 8);  // the schema's indexes, created once
}

TEST_CASE("a reader changes neither the file nor the WAL of a writer that has it open") {
  ScratchDir dir;
  std::string path = dir.file("live.db");
  auto writer = TraceWriter::open(path, {});
  for (int i = 1; i <= 100; ++i) writer->recordFrame({0, 0, "live.py", i, "f"});
  writer->flush();
  std::string file = testing::readFile(path);
  std::string wal = testing::readFile(path + "-wal");
  REQUIRE_FALSE(wal.empty());  // the rows are in the WAL, not yet in the file
  {
    auto reader = TraceReader::open(path);
    CHECK(reader->counts().frames == 100);
    CHECK(reader->integrityCheck() == "ok");
  }
  CHECK(testing::readFile(path) == file);
  CHECK(testing::readFile(path + "-wal") == wal);
  writer->close();
}

TEST_CASE("a writer that stopped mid-change: readers refuse the file untouched, a writer recovers") {
  ScratchDir dir;
  std::string path = dir.file("stopped.db");
  {
    auto writer = TraceWriter::open(path, {});
    writer->recordFrame({0, 0, "kept.py", 1, "f"});
  }
  // A store in rollback-journal mode (as a new store is until its creation commits), and a
  // process that dies in the middle of a transaction big enough to spill pages into the file.
  testing::rawExec(path, "PRAGMA journal_mode = DELETE;");
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    int rc = sqlite3_exec(db,
                          "PRAGMA cache_size = 5; BEGIN IMMEDIATE;"
                          "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                          "WHERE i < 400) INSERT INTO meta SELECT 'junk' || i, "
                          "hex(randomblob(500)) FROM n;",
                          nullptr, nullptr, nullptr);
    _exit(rc == SQLITE_OK ? 0 : 1);  // no COMMIT, no close: a hot journal stays
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(testing::fileExists(path + "-journal"));
  std::string file = testing::readFile(path);
  std::string journal = testing::readFile(path + "-journal");

  try {
    TraceReader::open(path);
    FAIL("the reader opened a file with a hot journal");
  } catch (const dynamo::UserError& e) {
    CHECK(e.summary() == "trace store '" + path +
                             "' holds an unfinished change of a writer that stopped");
    CHECK(e.hint() == "open it once for writing to roll the change back (dynamo-trace upgrade "
                      "FILE)");
  }
  CHECK(testing::readFile(path) == file);
  CHECK(testing::readFile(path + "-journal") == journal);

  // The next writer rolls the change back (SQLite's recovery) and goes on in WAL mode.
  auto writer = TraceWriter::open(path, {});
  writer->recordFrame({0, 0, "after.py", 1, "g"});
  writer->close();
  CHECK_FALSE(testing::fileExists(path + "-journal"));
  auto reader = TraceReader::open(path);
  CHECK(reader->runs().size() == 2);
  CHECK(reader->counts().frames == 2);
  CHECK(reader->integrityCheck() == "ok");
  CHECK(testing::rawQueryInt(path, "SELECT count(*) FROM meta WHERE key LIKE 'junk%'") == 0);
  CHECK(testing::readFile(path)[18] == 2);  // header byte 18: 2 is WAL mode
}
