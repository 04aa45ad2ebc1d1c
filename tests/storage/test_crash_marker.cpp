// Crash markers (crash_marker.h): a writer process that dies of a fatal signal leaves a marker
// naming the signal and the compile whose first call was running; the reader reports it, the next
// writer merges it into the store. SIGKILL leaves none. Writers killed beside live ones lose
// nothing committed and do not hold the others up.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>

#include "dynamo/storage/crash_marker.h"
#include "dynamo/storage/trace_reader.h"
#include "dynamo/explain/trace_report.h"
#include "dynamo/storage/trace_writer.h"
#include "dynamo_catch.h"
#include "test_support.h"

using namespace dynamo::storage;
using namespace dynamo::explain;
using dynamo::storage::testing::Child;
using dynamo::storage::testing::ScratchDir;

namespace {

std::string readPrefixed(Child& child, const std::string& prefix) {
  std::string line;
  REQUIRE(testing::readLine(child, line));
  REQUIRE(line.rfind(prefix, 0) == 0);
  return line.substr(prefix.size());
}

RunCrash crashOf(const std::string& path) {
  auto reader = TraceReader::open(path);
  std::vector<RunRecord> runs = reader->runs();
  REQUIRE(!runs.empty());
  return runs.front().crash;
}

}  // namespace

TEST_CASE("a crash marker's text round-trips; a torn or foreign one is refused") {
  CrashMarker m{3, SIGSEGV, CrashStage::kFirstCall, (RowId{3} << 32) | 7, 1700000000000000};
  std::string text = formatCrashMarker(m);
  CHECK(text == "dynamo-crash 1\nrun 3\nsignal 11\nstage 1\ncompile 12884901895\n"
                "time_us 1700000000000000\n");
  std::optional<CrashMarker> back = parseCrashMarker(text);
  REQUIRE(back);
  CHECK(back->runId == 3);
  CHECK(back->signal == SIGSEGV);
  CHECK(back->stage == CrashStage::kFirstCall);
  CHECK(back->compileId == m.compileId);
  CHECK(back->timeUs == m.timeUs);
  CHECK_FALSE(parseCrashMarker(text.substr(0, text.size() - 3)));  // cut mid-line
  CHECK_FALSE(parseCrashMarker(text.substr(0, 30)));               // lines missing
  CHECK_FALSE(parseCrashMarker("hello\n"));
  CHECK_FALSE(parseCrashMarker(""));
  CHECK(crashMarkerPath("/x/t.db", 4) == "/x/t.db-crash-4");
}

TEST_CASE("the crash sentence names the signal, the stage and the compile") {
  RunCrash c;
  CHECK(describeCrash(c, "") == "");
  c.signal = SIGABRT;
  c.stage = "unknown";
  CHECK(describeCrash(c, "") == "crashed (SIGABRT)");
  c.stage = "first_call";
  CHECK(describeCrash(c, "") == "crashed (SIGABRT) during the first call of a compiled function");
  c.compileId = 5;
  c.attempt = 2;
  c.frameName = "forward";
  c.frameLine = 7;
  CHECK(describeCrash(c, "m.py") ==
        "crashed (SIGABRT) during the first call of compile #2 of frame forward (m.py:7)");
  c.stage = "backend";
  CHECK(describeCrash(c, "m.py") ==
        "crashed (SIGABRT) in the backend compiling compile #2 of frame forward (m.py:7)");
  c.stage = "unknown";
  c.signal = SIGBUS;
  CHECK(describeCrash(c, "m.py") == "crashed (SIGBUS) after compile #2 of frame forward (m.py:7)");
  CHECK(signalName(SIGSEGV) == "SIGSEGV");
  CHECK(signalName(64) == "signal 64");
}

TEST_CASE("how a run ended: closed, crashed or did not close, in one sentence and one key") {
  RunRecord run;
  CHECK(describeRunEnd(run, "") == "did not close (still running, or killed)");
  CHECK(runEndKind(run) == "did_not_close");
  run.crash.signal = SIGSEGV;
  run.crash.stage = "backend";
  CHECK(describeRunEnd(run, "") == "crashed (SIGSEGV) in a backend");
  CHECK(runEndKind(run) == "crashed");
  run.endTimeUs = 5;  // a run that closed: a marker of it would be stale, and is not read
  CHECK(describeRunEnd(run, "") == "closed");
  CHECK(runEndKind(run) == "closed");
}

TEST_CASE("a writer that dies of a fatal signal leaves its compile, its graph and a marker") {
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS}) {
    CAPTURE(sig);
    ScratchDir dir;
    std::string path = dir.file("crash.db");
    Child child = testing::startChild({"crash", path, std::to_string(sig)});
    RowId runId = std::stoll(readPrefixed(child, "run "));
    RowId compileId = std::stoll(readPrefixed(child, "compile "));
    int status = testing::waitChild(child);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);  // the handler re-raised the same signal
    REQUIRE(testing::fileExists(crashMarkerPath(path, runId)));

    // Read before any writer merged the marker: the reader finds the file beside the store.
    {
      auto reader = TraceReader::open(path);
      CHECK(reader->integrityCheck() == "ok");
      REQUIRE(reader->graphs(compileId).size() == 1);
      CHECK(reader->graphs(compileId)[0].inputs == std::vector<std::string>{"x"});
      RunCrash c = reader->runs().front().crash;
      CHECK(c.signal == sig);
      CHECK(c.stage == "first_call");
      CHECK(c.compileId == compileId);
      CHECK(c.attempt == 0);
      CHECK(c.frameName == "forward");
      ReportOptions masked;
      masked.maskVolatile = true;
      CHECK(renderRuns(*reader, masked) ==
            "run 1: pid <masked>, started <masked>, crashed (" + signalName(sig) +
                ") during the first call of compile #0 of frame forward (model.py:7): "
                "trace_writer_child crash\n");
    }
    // The next writer merges the marker into the store and removes the file.
    TraceWriter::open(path, {})->close();
    CHECK_FALSE(testing::fileExists(crashMarkerPath(path, runId)));
    auto reader = TraceReader::open(path);
    std::vector<ArtifactRecord> artifacts = reader->artifacts(runId);
    REQUIRE(artifacts.size() == 1);
    CHECK(artifacts[0].name == kCrashArtifactName);
    CHECK(artifacts[0].compileId == compileId);
    CHECK(crashOf(path).signal == sig);
    CHECK(crashOf(path).compileId == compileId);
    // A second merge finds nothing to do.
    TraceWriter::open(path, {})->close();
    CHECK(TraceReader::open(path)->artifacts(runId).size() == 1);
  }
}

TEST_CASE("a torn marker is left alone and the run stays 'did not close'") {
  ScratchDir dir;
  std::string path = dir.file("torn.db");
  RunRecord run;
  run.argv = {"torn"};
  auto writer = TraceWriter::open(path, run);
  RowId runId = writer->runId();
  writer.reset();
  testing::rawExec(path, "UPDATE runs SET end_time_us = NULL");
  testing::writeFile(crashMarkerPath(path, runId), "dynamo-crash 1\nrun 1\nsig");
  CHECK(crashOf(path).signal == 0);
  TraceWriter::open(path, {})->close();
  CHECK(crashOf(path).signal == 0);
  CHECK(TraceReader::open(path)->artifacts(runId).empty());
}

TEST_CASE("SIGKILL cannot be caught: no marker, the run stays 'did not close'") {
  ScratchDir dir;
  std::string path = dir.file("killed.db");
  Child child = testing::startChild({"ack", path});
  RowId runId = std::stoll(readPrefixed(child, "run "));
  readPrefixed(child, "ack ");
  REQUIRE(kill(child.pid, SIGKILL) == 0);
  std::string line;
  while (testing::readLine(child, line)) {
  }
  testing::waitChild(child);
  CHECK_FALSE(testing::fileExists(crashMarkerPath(path, runId)));
  auto reader = TraceReader::open(path);
  CHECK(reader->runs().front().crash.signal == 0);
  ReportOptions masked;
  masked.maskVolatile = true;
  CHECK(renderRuns(*reader, masked) ==
        "run 1: pid <masked>, started <masked>, did not close (still running, or killed): "
        "trace_writer_child ack\n");
}

TEST_CASE("four writers, two killed mid-run: nothing committed is lost, the others go on") {
  ScratchDir dir;
  std::string path = dir.file("four.db");
  // Two writers that flush every 5 events and are killed with SIGKILL while writing (they may
  // hold SQLite's write lock at that moment), and two that write 2000 compiles each and close.
  Child doomed[2] = {testing::startChild({"ack", path}), testing::startChild({"ack", path})};
  RowId doomedRuns[2] = {std::stoll(readPrefixed(doomed[0], "run ")),
                         std::stoll(readPrefixed(doomed[1], "run "))};
  int lastAck[2] = {std::stoi(readPrefixed(doomed[0], "ack ")),
                    std::stoi(readPrefixed(doomed[1], "ack "))};
  const int n = 2000;
  auto t0 = std::chrono::steady_clock::now();
  Child live[2] = {testing::startChild({"burst", path, "a", std::to_string(n)}),
                   testing::startChild({"burst", path, "b", std::to_string(n)})};
  RowId liveRuns[2] = {std::stoll(readPrefixed(live[0], "run ")),
                       std::stoll(readPrefixed(live[1], "run "))};
  for (int i = 0; i < 2; ++i) {
    REQUIRE(kill(doomed[i].pid, SIGKILL) == 0);
    std::string line;
    while (testing::readLine(doomed[i], line)) lastAck[i] = std::stoi(line.substr(4));
    int status = testing::waitChild(doomed[i]);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
  }
  for (Child& c : live) {
    int status = testing::waitChild(c);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // A dead writer's lock is released by the kernel with its process: the live writers never
  // wait for SQLite's 30 s busy timeout (they take about a second on a busy 2-core machine).
  CHECK(seconds < 15.0);

  auto reader = TraceReader::open(path);
  CHECK(reader->integrityCheck() == "ok");
  for (RowId run : liveRuns) {
    StoreCounts c = reader->counts(run);
    CHECK(c.frames == n);
    CHECK(c.compiles == n);
    CHECK(c.guards == n);
  }
  for (int i = 0; i < 2; ++i) {
    std::set<int> present;
    for (const FrameRecord& f : reader->frames(doomedRuns[i])) present.insert(f.firstLine);
    int missing = 0;
    for (int line = 1; line <= lastAck[i]; ++line) missing += present.count(line) == 0;
    CHECK(lastAck[i] > 0);
    CHECK(missing == 0);
  }
  for (const RunRecord& r : reader->runs()) {
    bool closed = r.id == liveRuns[0] || r.id == liveRuns[1];
    CHECK((r.endTimeUs > 0) == closed);
    CHECK(r.crash.signal == 0);
  }
}
