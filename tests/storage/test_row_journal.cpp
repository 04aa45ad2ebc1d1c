// The row journal (storage/src/row_journal.h, TraceWriter::persist): rows persisted with one
// write() survive SIGKILL before any commit, and the next opener (reader or writer) inserts them;
// a live writer's journal is left alone; a torn tail is ignored; the writer thread empties the
// journal once it committed, and close() removes it.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using dynamo::storage::testing::Child;
using dynamo::storage::testing::ScratchDir;

namespace {

std::string readPrefixed(Child& child, const std::string& prefix) {
  std::string line;
  REQUIRE(testing::readLine(child, line));
  REQUIRE(line.rfind(prefix, 0) == 0);
  return line.substr(prefix.size());
}

constexpr long long kHeader = 32;  // the journal's header (row_journal.h)

std::string journalOf(const std::string& path, RowId run) {
  return path + "-rows-" + std::to_string(run);
}

long long fileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
}

void killAndWait(Child& child) {
  REQUIRE(kill(child.pid, SIGKILL) == 0);
  std::string line;
  while (testing::readLine(child, line)) {
  }
  testing::waitChild(child);
}

// Every row trace_writer_child's "journal" mode persisted, field by field.
void checkJournalRows(const std::string& path, RowId run, RowId compile) {
  auto reader = TraceReader::open(path);
  CHECK(reader->integrityCheck() == "ok");
  std::vector<FrameRecord> frames = reader->frames(run);
  REQUIRE(frames.size() == 1);
  CHECK((frames[0].file == "model.py" && frames[0].firstLine == 7 && frames[0].name == "forward"));
  std::vector<CompileRecord> compiles = reader->compilesOfRun(run);
  REQUIRE(compiles.size() == 1);
  const CompileRecord& c = compiles[0];
  CHECK(c.id == compile);
  CHECK(c.frameId == frames[0].id);
  CHECK(c.attempt == 1);
  CHECK(c.status == "graph_break");
  CHECK(c.reason == "tensor 'x' dtype mismatch");
  CHECK((c.startTimeUs == 123 && c.durationUs == 456));
  REQUIRE(c.phases.size() == 2);
  CHECK((c.phases[1].name == "backend" && c.phases[1].durationUs == 56));
  std::vector<GraphRecord> graphs = reader->graphs(compile);
  REQUIRE(graphs.size() == 1);
  CHECK(graphs[0].serialized == std::string("{\"nodes\": [\0]}", 14));
  CHECK(graphs[0].printed == "graph():\n  %x");
  CHECK(graphs[0].numNodes == 3);
  CHECK(graphs[0].inputs == std::vector<std::string>{"x", "y"});
  CHECK(graphs[0].outputs == std::vector<std::string>{"out"});
  std::vector<GraphBreakRecord> breaks = reader->graphBreaks(compile);
  REQUIRE(breaks.size() == 1);
  CHECK(breaks[0].kind == "print");
  CHECK((breaks[0].location.line == 9 && breaks[0].location.sourceLine == "print(x)"));
  CHECK(breaks[0].detail == "call to print()");
  CHECK(breaks[0].hints == std::vector<std::string>{"remove the print", "log after the call"});
  CHECK(breaks[0].userStack.size() == 2);
  std::vector<GuardRecord> guards = reader->guards(compile);
  REQUIRE(guards.size() == 1);
  CHECK((guards[0].kind == "TENSOR_MATCH" && guards[0].checks == "x: f32[4]"));
  std::vector<GuardFailureRecord> failures = reader->guardFailures(run);
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].guardId == guards[0].id);
  CHECK((failures[0].property == "dtype" && failures[0].seen == "int64"));
  CHECK(failures[0].causedCompileId == compile);
  std::vector<CodeRecord> code = reader->code(run, compile);
  REQUIRE(code.size() == 1);
  CHECK((code[0].kind == CodeKind::kTransformedBytecode && code[0].content == "LOAD_FAST x"));
  std::vector<ArtifactRecord> artifacts = reader->artifacts(run);
  REQUIRE(artifacts.size() == 1);
  CHECK((artifacts[0].name == "aot.joint" && artifacts[0].data == "joint graph"));
  CHECK(reader->runs().front().endTimeUs == 0);  // the run still did not close
}

}  // namespace

TEST_CASE("rows persisted to the journal survive SIGKILL; the next reader inserts every one") {
  ScratchDir dir;
  std::string path = dir.file("j.db");
  Child child = testing::startChild({"journal", path});
  RowId run = std::stoll(readPrefixed(child, "run "));
  RowId compile = std::stoll(readPrefixed(child, "persisted "));
  REQUIRE(fileSize(journalOf(path, run)) > 0);
  // The writer is alive: its journal is its own (locked); a reader leaves it alone, and sees
  // only what was committed (nothing: its batches wait an hour).
  CHECK(TraceReader::open(path)->compilesOfRun(run).empty());
  CHECK(fileSize(journalOf(path, run)) > 0);
  killAndWait(child);
  CHECK(testing::rawQueryInt(path, "SELECT count(*) FROM compiles") == 0);
  checkJournalRows(path, run, compile);
  CHECK_FALSE(testing::fileExists(journalOf(path, run)));
  // A second open finds nothing to do.
  checkJournalRows(path, run, compile);
}

TEST_CASE("a torn record at the journal's end is ignored, and a writer recovers the rest") {
  ScratchDir dir;
  std::string path = dir.file("torn.db");
  Child child = testing::startChild({"journal", path});
  RowId run = std::stoll(readPrefixed(child, "run "));
  RowId compile = std::stoll(readPrefixed(child, "persisted "));
  killAndWait(child);
  // A write cut short by the kill: a record's header and part of its body.
  std::string journal = journalOf(path, run);
  testing::writeFile(journal, testing::readFile(journal) + std::string("DYRJ\x40\0\0\0\x01xy", 11));
  TraceWriter::open(path, {})->close();
  CHECK_FALSE(testing::fileExists(journal));
  checkJournalRows(path, run, compile);
}

TEST_CASE("the writer thread empties the journal once it committed; close() removes it") {
  ScratchDir dir;
  std::string path = dir.file("live.db");
  auto w = TraceWriter::open(path, {});
  std::string journal = journalOf(path, w->runId());
  w->persist();  // turns the journal on (commits what waits: nothing)
  CHECK_FALSE(testing::fileExists(journal));
  w->recordFrame({0, 0, "a.py", 1, "f"});
  w->persist();
  CHECK(fileSize(journal) > kHeader);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // Committed by the writer thread's batch (100 ms), the journal keeps only its 32-byte header
  // (which run wrote it).
  while (fileSize(journal) != kHeader && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(fileSize(journal) == kHeader);
  CHECK(TraceReader::open(path)->frames(w->runId()).size() == 1);
  w->recordFrame({0, 0, "a.py", 2, "g"});
  w->persist();
  w->close();
  CHECK_FALSE(testing::fileExists(journal));
  CHECK(TraceReader::open(path)->frames(1).size() == 2);
}

TEST_CASE("a journal left beside a store that was replaced is dropped, not inserted") {
  ScratchDir dir;
  std::string path = dir.file("old.db");
  Child child = testing::startChild({"journal", path});
  RowId run = std::stoll(readPrefixed(child, "run "));
  readPrefixed(child, "persisted ");
  killAndWait(child);
  std::string journal = journalOf(path, run);
  REQUIRE(fileSize(journal) > kHeader);
  // The store goes, its journal stays; a new store of the same name gets a run 1 too.
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  RunRecord fresh;
  fresh.argv = {"fresh"};
  auto w = TraceWriter::open(path, fresh);
  CHECK(w->runId() == run);
  CHECK_FALSE(testing::fileExists(journal));  // dropped: another pid and start time
  w->recordFrame({0, 0, "new.py", 1, "g"});
  w->close();  // no clash with the old journal's ids
  auto reader = TraceReader::open(path);
  std::vector<FrameRecord> frames = reader->frames(run);
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].file == "new.py");
  CHECK(reader->compilesOfRun(run).empty());
}
