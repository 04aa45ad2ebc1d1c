// A trace writer in its own process, for the tests that need one (and for measurements):
//
//   trace_writer_child ack PATH          write events forever; after every flush print
//                                        "ack <n>" (every event <= n is acknowledged)
//   trace_writer_child burst PATH TAG N  write N frames (+ a compile and a guard each), flushing
//                                        every 50, then close; prints "run <id>" first
//   trace_writer_child burst PATH TAG N GO_FD
//                                        the same, but print "ready" and wait for a byte on the
//                                        inherited pipe GO_FD before opening (a start barrier)
//   trace_writer_child read PATH GO_FD   print "ready", wait for the barrier, then open the store
//                                        read-only until 30 opens succeeded (or 5 s); "not there
//                                        yet" (missing or 0-byte file) is fine, any other
//                                        refusal is printed to stderr and exits 1; prints
//                                        "reads <n>" (successful opens) at the end
//   trace_writer_child bench PATH N      time N record calls and the final flush
//   trace_writer_child compiles PATH N   thread CPU per small compile's rows (a frame, a compile,
//                                        a graph, 3 guards, its bytecode), committed one by one
//                                        (flush per compile) and in batches
//   trace_writer_child crash PATH SIG    record a frame, a compile and its graph, note the compile's
//                                        first call (crash marker), flush, print "compile <id>",
//                                        then die of signal SIG (11: a real null dereference,
//                                        6: abort(), others: raise)
//   trace_writer_child journal PATH      one row of every kind (fields the test checks), persist()
//                                        (the row journal; the writer thread never commits: 1 h
//                                        batches), print "persisted <compile id>", then wait to be
//                                        killed (60 s)
//
// The writer modes print "run <id>" first (after "ready" with a barrier).
#include <signal.h>
#include <unistd.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dynamo/common/error.h"
#include "dynamo/storage/trace_reader.h"
#include "dynamo/storage/trace_writer.h"

using namespace dynamo::storage;

namespace {

std::unique_ptr<TraceWriter> openWriter(const char* path, const char* tag) {
  RunRecord run;
  run.argv = {"trace_writer_child", tag};
  run.dynamoVersion = "test";
  auto writer = TraceWriter::open(path, run);
  std::printf("run %lld\n", static_cast<long long>(writer->runId()));
  std::fflush(stdout);
  return writer;
}

int ack(const char* path) {
  auto writer = openWriter(path, "ack");
  std::string payload(2048, 'x');
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 1; std::chrono::steady_clock::now() < deadline; ++i) {
    RowId frame = writer->recordFrame({0, 0, "ack.py", i, "event"});
    writer->recordArtifact({0, 0, 0, "payload-" + std::to_string(i), "text/plain", payload, 0});
    (void)frame;
    if (i % 5 == 0) {
      writer->flush();
      std::printf("ack %d\n", i);
      std::fflush(stdout);
    }
  }
  return 0;  // the parent kills us long before
}

// Says "ready", then blocks until the parent writes a byte to `fd` (or closes it: exit 3).
void waitAtBarrier(int fd) {
  std::printf("ready\n");
  std::fflush(stdout);
  char go = 0;
  if (read(fd, &go, 1) != 1) {
    std::fprintf(stderr, "trace_writer_child: the start barrier closed before it opened\n");
    std::exit(3);
  }
  close(fd);
}

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

int burst(const char* path, const char* tag, int n, int goFd) {
  if (goFd >= 0) waitAtBarrier(goFd);
  auto writer = openWriter(path, tag);
  for (int i = 1; i <= n; ++i) {
    RowId frame = writer->recordFrame({0, 0, std::string(tag) + ".py", i, "f"});
    CompileRecord compile;
    compile.frameId = frame;
    compile.status = "ok";
    compile.reason = "first call";
    RowId compileId = writer->recordCompile(compile);
    GuardRecord guard;
    guard.compileId = compileId;
    guard.kind = "TENSOR_MATCH";
    guard.checks = "x.size() == (" + std::to_string(i) + ",)";
    writer->recordGuard(guard);
    if (i % 50 == 0) writer->flush();
  }
  writer->close();
  return 0;
}

int readWhileCreated(const char* path, int goFd) {
  waitAtBarrier(goFd);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int reads = 0;
  while (reads < 30 && std::chrono::steady_clock::now() < deadline) {
    try {
      auto reader = TraceReader::open(path);
      if (reader->schemaVersion() < 1) throw std::runtime_error("schema version below 1");
      (void)reader->runs();
      (void)reader->counts();
      ++reads;
    } catch (const dynamo::UserError& e) {
      // Before the first writer's creation commits, the file is missing or has 0 bytes.
      std::string summary = e.summary();
      bool notThereYet = contains(summary, "does not exist") ||
                         contains(summary, "' is empty, not a trace store");
      if (!notThereYet) throw;
    }
  }
  std::printf("reads %d\n", reads);
  return 0;
}

int bench(const char* path, int n) {
  auto writer = openWriter(path, "bench");
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  for (int i = 1; i <= n; ++i) writer->recordGuardFailure({0, 0, 1, 1, 0, 0, "size mismatch"});
  auto t1 = clock::now();
  writer->flush();
  auto t2 = clock::now();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  auto total = std::chrono::duration_cast<std::chrono::microseconds>(t2 - t0).count();
  WriterStats stats = writer->stats();
  std::printf("record: %.0f ns/call; %d rows committed in %.1f ms (%.0f rows/s) in %llu batches\n",
              static_cast<double>(ns) / n, n, static_cast<double>(total) / 1e3,
              n / (static_cast<double>(total) / 1e6),
              static_cast<unsigned long long>(stats.batches));
  return 0;
}

int crash(const char* path, int sig) {
  auto writer = openWriter(path, "crash");
  RowId frame = writer->recordFrame({0, 0, "model.py", 7, "forward"});
  CompileRecord compile;
  compile.frameId = frame;
  compile.status = "ok";
  compile.reason = "first call";
  RowId compileId = writer->recordCompile(compile);
  GraphRecord graph;
  graph.compileId = compileId;
  graph.format = "dynamo.graph/1";
  graph.serialized = "{\"nodes\": []}";
  graph.inputs = {"x"};
  writer->recordGraph(graph);
  writer->noteCrashStage(CrashStage::kFirstCall, compileId);
  writer->flush();
  std::printf("compile %lld\n", static_cast<long long>(compileId));
  std::fflush(stdout);
  if (sig == SIGSEGV) {
    int* volatile null = nullptr;  // volatile: the compiler cannot see it is null
    return *null;
  }
  if (sig == SIGABRT) std::abort();
  raise(sig);
  return 0;
}

// One row of every kind, persisted (one write to the row journal), never committed.
int journal(const char* path) {
  RunRecord run;
  run.argv = {"trace_writer_child", "journal"};
  WriterOptions options;
  options.batchRows = 1 << 20;
  options.maxDelay = std::chrono::hours(1);
  auto w = TraceWriter::open(path, run, options);
  std::printf("run %lld\n", static_cast<long long>(w->runId()));
  std::fflush(stdout);
  w->persist();  // the first call commits (nothing yet) and turns the journal on
  RowId frame = w->recordFrame({0, 0, "model.py", 7, "forward"});
  CompileRecord c;
  c.frameId = frame;
  c.attempt = 1;
  c.status = "graph_break";
  c.reason = "tensor 'x' dtype mismatch";
  c.startTimeUs = 123;
  c.durationUs = 456;
  c.phases = {{"capture", 400}, {"backend", 56}};
  RowId compile = w->recordCompile(c);
  GraphRecord g;
  g.compileId = compile;
  g.format = "dynamo.graph/1";
  g.serialized = std::string("{\"nodes\": [\0]}", 14);  // bytes, NUL included
  g.printed = "graph():\n  %x";
  g.numNodes = 3;
  g.inputs = {"x", "y"};
  g.outputs = {"out"};
  w->recordGraph(g);
  GraphBreakRecord b;
  b.compileId = compile;
  b.kind = "print";
  b.location = {"model.py", 9, "print(x)"};
  b.detail = "call to print()";
  b.explanation = "printing is a side effect";
  b.hints = {"remove the print", "log after the call"};
  b.userStack = {"train.py:3: f(x)", "model.py:9: print(x)"};
  w->recordGraphBreak(b);
  GuardRecord guard;
  guard.compileId = compile;
  guard.kind = "TENSOR_MATCH";
  guard.checks = "x: f32[4]";
  guard.source = "x";
  guard.location = {"model.py", 8, "y = x * 2"};
  RowId guardId = w->recordGuard(guard);
  GuardFailureRecord f;
  f.compileId = compile;
  f.frameId = frame;
  f.guardId = guardId;
  f.reason = "tensor 'x' dtype mismatch: expected float32, got int64";
  f.guardKind = "TENSOR_MATCH";
  f.guardSource = "x";
  f.property = "dtype";
  f.expected = "float32";
  f.seen = "int64";
  f.location = {"model.py", 8, "y = x * 2"};
  f.causedCompileId = compile;
  w->recordGuardFailure(f);
  w->recordCode({0, 0, compile, CodeKind::kTransformedBytecode, "forward", "LOAD_FAST x"});
  w->recordArtifact({0, 0, compile, "aot.joint", "text/plain", "joint graph", 0});
  w->persist();
  std::printf("persisted %lld\n", static_cast<long long>(compile));
  std::fflush(stdout);
  sleep(60);
  return 0;
}

}  // namespace

// The rows of one small compile, as the compile sink records them for `x * i + 1`.
RowId recordSmallCompile(TraceWriter& w, int i) {
  static const std::string graphJson(900, 'j'), printed(300, 'p'), bytecode(1400, 'b');
  RowId frame = w.recordFrame({0, 0, "/src/small.py", i, "f" + std::to_string(i)});
  CompileRecord c;
  c.frameId = frame;
  c.status = "ok";
  c.reason = "first call";
  c.durationUs = 400;
  c.phases = {{"capture", 200}, {"guards", 20}, {"backend", 10}};
  RowId compile = w.recordCompile(c);
  GraphRecord g;
  g.compileId = compile;
  g.format = "dynamo.graph/1";
  g.serialized = graphJson;
  g.printed = printed;
  g.numNodes = 2;
  g.inputs = {"x"};
  g.outputs = {"add"};
  w.recordGraph(g);
  for (int k = 0; k < 3; ++k)
    w.recordGuard({0, 0, compile, "TENSOR_MATCH", "tensor x: float32 cpu sizes=[4]", "x",
                   {"/src/small.py", i + 1, "return x * 2 + 1"}});
  w.recordCode({0, 0, compile, CodeKind::kTransformedBytecode, "f", bytecode});
  return compile;
}

double threadCpuUs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int compiles(const char* path, int n) {
  auto writer = openWriter(path, "compiles");
  for (int i = 0; i < 20; ++i) recordSmallCompile(*writer, i);  // warm-up: statements, pages
  writer->flush();
  double c0 = threadCpuUs();
  for (int i = 0; i < n; ++i) {
    recordSmallCompile(*writer, 1000 + i);
    writer->flush();
  }
  double c1 = threadCpuUs();
  for (int i = 0; i < n; ++i) recordSmallCompile(*writer, 100000 + i);
  double c2 = threadCpuUs();
  writer->flush();  // the whole batch on this thread, for comparison
  double c3 = threadCpuUs();
  std::printf("per compile, thread CPU: commit each %.1f us; enqueue only %.1f us; "
              "one commit for all %.1f us\n",
              (c1 - c0) / n, (c2 - c1) / n, (c3 - c1) / n);
  return 0;
}

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::strcmp(argv[1], "ack") == 0) return ack(argv[2]);
    if ((argc == 5 || argc == 6) && std::strcmp(argv[1], "burst") == 0)
      return burst(argv[2], argv[3], std::atoi(argv[4]), argc == 6 ? std::atoi(argv[5]) : -1);
    if (argc == 4 && std::strcmp(argv[1], "read") == 0)
      return readWhileCreated(argv[2], std::atoi(argv[3]));
    if (argc == 4 && std::strcmp(argv[1], "bench") == 0) return bench(argv[2], std::atoi(argv[3]));
    if (argc == 4 && std::strcmp(argv[1], "compiles") == 0)
      return compiles(argv[2], std::atoi(argv[3]));
    if (argc == 4 && std::strcmp(argv[1], "crash") == 0) return crash(argv[2], std::atoi(argv[3]));
    if (argc == 3 && std::strcmp(argv[1], "journal") == 0) return journal(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: trace_writer_child ack PATH | burst PATH TAG N [GO_FD] | "
               "read PATH GO_FD | bench PATH N\n");
  return 2;
}
