// dynamo-trace: prints reports over a trace store. A thin main: the reports live in
// dynamo::explain (trace_report.h) so the tests and the GUI share them.
//
//   dynamo-trace summary|runs|breaks|compiles|failures TRACE.db [--mask]
//   dynamo-trace check TRACE.db       schema version and PRAGMA integrity_check
//   dynamo-trace upgrade TRACE.db     upgrade the file to this build's schema in place
//   dynamo-trace schema               list the schema versions
//   dynamo-trace graph TRACE.db COMPILE_ID [--json]
//                                     the graphs of a compile, read back by the C++ graph reader
//                                     and printed (or re-serialized, one node per line); no
//                                     Python interpreter is started
//   dynamo-trace aot-graph TRACE.db COMPILE_ID [joint|forward|backward] [--json]
//                                     the AOT graphs of a compile (aot_eager and friends), the
//                                     same way
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dynamo/common/error.h"
#include "dynamo/core/graph_printer.h"
#include "dynamo/core/graph_serializer.h"
#include "dynamo/storage/trace_reader.h"
#include "dynamo/explain/aot_report.h"
#include "dynamo/explain/trace_report.h"
#include "dynamo/storage/trace_store.h"

using namespace dynamo::storage;
using dynamo::explain::ReportCommand;
using dynamo::explain::ReportOptions;
using dynamo::explain::reportCommands;

namespace {

int usage() {
  std::fprintf(stderr, "usage: dynamo-trace COMMAND TRACE.db [--mask]\n\ncommands:\n");
  for (const ReportCommand& c : reportCommands())
    std::fprintf(stderr, "  %-10s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(stderr, "  %-10s %s\n", "graph",
               "TRACE.db COMPILE_ID [--json]: the graphs of a compile, printed (or as JSON)");
  std::fprintf(stderr, "  %-10s %s\n", "aot-graph",
               "TRACE.db COMPILE_ID [joint|forward|backward] [--json]: the AOT graphs of a "
               "compile");
  std::fprintf(stderr,
               "  %-10s %s\n  %-10s %s\n  %-10s %s\n", "check",
               "schema version and SQLite integrity check", "upgrade",
               "upgrade the file to this build's schema, keeping every row", "schema",
               "list the schema versions (no file)");
  std::fprintf(stderr, "\n--mask replaces times, pids and host names by <masked>.\n");
  return 2;
}

int run(const std::string& command, const std::string& path, bool mask) {
  if (command == "upgrade") {
    int old = upgradeTraceStore(path);
    std::printf("%s: schema version %d -> %d\n", path.c_str(), old, kSchemaVersion);
    return 0;
  }
  auto reader = TraceReader::open(path);
  if (command == "check") {
    std::string result = reader->integrityCheck();
    std::printf("%s: schema version %d, integrity %s\n", path.c_str(), reader->schemaVersion(),
                result.c_str());
    return result == "ok" ? 0 : 1;
  }
  for (const ReportCommand& c : reportCommands()) {
    if (c.name == command) {
      std::fputs(c.render(*reader, ReportOptions{mask}).c_str(), stdout);
      return 0;
    }
  }
  std::fprintf(stderr, "dynamo-trace: unknown command '%s'\n\n", command.c_str());
  return usage();
}

// dynamo-trace graph TRACE.db COMPILE_ID [--json]
int printGraphs(const std::string& path, const std::string& compileText, bool json) {
  char* end = nullptr;
  long long compileId = std::strtoll(compileText.c_str(), &end, 10);
  if (compileText.empty() || *end != '\0' || compileId <= 0) {
    std::fprintf(stderr, "dynamo-trace: COMPILE_ID must be a positive integer, not '%s'\n",
                 compileText.c_str());
    return 2;
  }
  auto reader = TraceReader::open(path);
  std::vector<GraphRecord> graphs = reader->graphs(compileId);
  if (graphs.empty()) {
    std::fprintf(stderr, "dynamo-trace: compile %lld of %s has no graphs\n", compileId,
                 path.c_str());
    return 1;
  }
  for (const GraphRecord& g : graphs) {
    dynamo::core::Graph graph = dynamo::core::readGraphJson(g.serialized);
    if (json) {
      dynamo::core::SerializeOptions options;
      options.pretty = true;
      std::fputs(dynamo::core::serializeGraph(graph, options).c_str(), stdout);
    } else {
      std::printf("# compile %lld, graph %d: %zu nodes\n", compileId, g.index, graph.size());
      std::fputs(dynamo::core::printGraph(graph).c_str(), stdout);
    }
  }
  return 0;
}

void printOneGraph(const std::string& serialized, const std::string& title, bool json) {
  dynamo::core::Graph graph = dynamo::core::readGraphJson(serialized);
  if (json) {
    dynamo::core::SerializeOptions options;
    options.pretty = true;
    std::fputs(dynamo::core::serializeGraph(graph, options).c_str(), stdout);
  } else {
    std::printf("# %s: %zu nodes\n", title.c_str(), graph.size());
    std::fputs(dynamo::core::printGraph(graph).c_str(), stdout);
  }
}

bool parseCompileId(const std::string& text, long long& id) {
  char* end = nullptr;
  id = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || id <= 0) {
    std::fprintf(stderr, "dynamo-trace: COMPILE_ID must be a positive integer, not '%s'\n",
                 text.c_str());
    return false;
  }
  return true;
}

// dynamo-trace aot-graph TRACE.db COMPILE_ID [joint|forward|backward] [--json]
int printAotGraphs(const std::string& path, const std::string& compileText,
                   const std::string& which, bool json) {
  long long compileId = 0;
  if (!parseCompileId(compileText, compileId)) return 2;
  if (!which.empty() && which != "joint" && which != "forward" && which != "backward") {
    std::fprintf(stderr,
                 "dynamo-trace: unknown AOT graph '%s': use joint, forward or backward (or "
                 "nothing for all three)\n",
                 which.c_str());
    return 2;
  }
  auto reader = TraceReader::open(path);
  std::vector<dynamo::explain::GraphAot> records =
      dynamo::explain::aotRecordsOfCompile(*reader, compileId);
  if (records.empty()) {
    std::fprintf(stderr,
                 "dynamo-trace: compile %lld of %s has no AOT records (it did not use an AOT "
                 "backend such as aot_eager); list the AOT compiles with: dynamo-trace aot %s\n",
                 compileId, path.c_str(), path.c_str());
    return 1;
  }
  int printed = 0;
  for (size_t k = 0; k < records.size(); ++k) {
    const dynamo::explain::GraphAot& a = records[k];
    if (!a.fallback.empty() && !json)
      std::printf("# compile %lld, graph %zu: %s ran it on the eager runner: %s\n", compileId, k,
                  a.backend.c_str(), a.fallback.c_str());
    for (const auto& [name, serialized] : a.graphs) {
      if (!which.empty() && name != which) continue;
      printOneGraph(serialized,
                    "compile " + std::to_string(compileId) + ", graph " + std::to_string(k) +
                        ", aot " + name + " graph",
                    json);
      ++printed;
    }
  }
  if (printed == 0 && !which.empty()) {
    std::fprintf(stderr, "dynamo-trace: compile %lld of %s has no AOT %s graph%s\n", compileId,
                 path.c_str(), which.c_str(),
                 which == "forward" ? "" : " (an inference compile has only a forward graph)");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "schema") == 0) {
    std::fputs(describeMigrations().c_str(), stdout);
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "graph") == 0) {
    bool json = argc == 5 && std::strcmp(argv[4], "--json") == 0;
    if (argc != 4 && !json) return usage();
    try {
      return printGraphs(argv[2], argv[3], json);
    } catch (const dynamo::UserError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  if (argc >= 2 && std::strcmp(argv[1], "aot-graph") == 0) {
    if (argc < 4 || argc > 6) return usage();
    std::string which;
    bool json = false;
    for (int i = 4; i < argc; ++i) {
      if (std::strcmp(argv[i], "--json") == 0 && !json) json = true;
      else if (which.empty() && argv[i][0] != '-') which = argv[i];
      else return usage();
    }
    try {
      return printAotGraphs(argv[2], argv[3], which, json);
    } catch (const dynamo::UserError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  bool mask = argc == 4 && std::strcmp(argv[3], "--mask") == 0;
  if (argc != 3 && !mask) return usage();
  try {
    return run(argv[1], argv[2], mask);
  } catch (const dynamo::UserError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  }
}
