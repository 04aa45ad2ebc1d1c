// Several processes: a writer killed with SIGKILL loses nothing it acknowledged, and two writer
// processes share one file. The writers are trace_writer_child processes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>

#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using dynamo::storage::testing::Child;
using dynamo::storage::testing::ScratchDir;

namespace {
RowId readRunId(Child& child) {
  std::string line;
  REQUIRE(testing::readLine(child, line));
  REQUIRE(line.rfind("run ", 0) == 0);
  return std::stoll(line.substr(4));
}
}  // namespace

TEST_CASE("SIGKILL mid-run loses no acknowledged event and leaves a sound file") {
  ScratchDir dir;
  std::string path = dir.file("killed.db");
  Child child = testing::startChild({"ack", path});
  RowId runId = readRunId(child);

  // Let it write a while, then kill it without warning while it is writing.
  int lastAck = 0;
  std::string line;
  while (lastAck < 300 && testing::readLine(child, line)) {
    REQUIRE(line.rfind("ack ", 0) == 0);
    lastAck = std::stoi(line.substr(4));
  }
  REQUIRE(lastAck >= 300);
  REQUIRE(kill(child.pid, SIGKILL) == 0);
  // Acks already in the pipe were printed after their flush returned: they count too.
  while (testing::readLine(child, line)) lastAck = std::stoi(line.substr(4));
  int status = testing::waitChild(child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  auto reader = TraceReader::open(path);
  CHECK(reader->integrityCheck() == "ok");
  std::set<int> present;
  for (const FrameRecord& f : reader->frames(runId)) present.insert(f.firstLine);
  int missing = 0;
  for (int i = 1; i <= lastAck; ++i) missing += present.count(i) == 0;
  CHECK(missing == 0);
  CHECK(static_cast<int>(reader->artifacts(runId).size()) >= lastAck);
  std::vector<RunRecord> runs = reader->runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].endTimeUs == 0);  // it never closed
  reader.reset();

  // The file stays usable: a new writer recovers the WAL and appends.
  auto writer = TraceWriter::open(path, {});
  writer->recordFrame({0, 0, "after.py", 1, "f"});
  writer->close();
  auto after = TraceReader::open(path);
  CHECK(after->runs().size() == 2);
  CHECK(after->integrityCheck() == "ok");
}

TEST_CASE("two writer processes write one file at once and every row arrives") {
  ScratchDir dir;
  std::string path = dir.file("shared.db");
  const int n = 3000;
  Child a = testing::startChild({"burst", path, "a", std::to_string(n)});
  Child b = testing::startChild({"burst", path, "b", std::to_string(n)});
  RowId runA = readRunId(a);
  RowId runB = readRunId(b);
  int statusA = testing::waitChild(a);
  int statusB = testing::waitChild(b);
  REQUIRE(WIFEXITED(statusA));
  REQUIRE(WEXITSTATUS(statusA) == 0);
  REQUIRE(WIFEXITED(statusB));
  REQUIRE(WEXITSTATUS(statusB) == 0);
  CHECK(runA != runB);

  auto reader = TraceReader::open(path);
  CHECK(reader->integrityCheck() == "ok");
  REQUIRE(reader->runs().size() == 2);
  for (RowId run : {runA, runB}) {
    StoreCounts c = reader->counts(run);
    CHECK(c.frames == n);
    CHECK(c.compiles == n);
    CHECK(c.guards == n);
    std::vector<FrameRecord> frames = reader->frames(run);
    std::set<int> lines;
    for (const FrameRecord& f : frames) lines.insert(f.firstLine);
    CHECK(static_cast<int>(lines.size()) == n);
    CHECK(frames.front().file == (run == runA ? "a.py" : "b.py"));
  }
  // Both runs closed cleanly.
  for (const RunRecord& r : reader->runs()) CHECK(r.endTimeUs > 0);
}

TEST_CASE("a writer inherited through fork() stays the parent's") {
  ScratchDir dir;
  std::string path = dir.file("fork.db");
  auto writer = TraceWriter::open(path, {});
  writer->recordFrame({0, 0, "parent.py", 1, "before"});
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // In the child: records go nowhere, flush says why, and destroying the writer neither
    // hangs on the parent's thread nor aborts. Exit codes report what went wrong.
    writer->recordFrame({0, 0, "child.py", 1, "lost"});
    int code = 0;
    try {
      writer->flush();
      code = 10;
    } catch (const dynamo::UserError& e) {
      if (std::string(e.what()).find("opened by the parent process before fork()") ==
          std::string::npos)
        code = 11;
    }
    writer.reset();
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  writer->recordFrame({0, 0, "parent.py", 2, "after"});
  writer->close();
  auto reader = TraceReader::open(path);
  std::vector<FrameRecord> frames = reader->frames(reader->runs()[0].id);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].name == "before");
  CHECK(frames[1].name == "after");
}
