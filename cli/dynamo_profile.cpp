// dynamo-profile: the recompilation profiler. Runs a script with capture and the trace store on
// (or reads --db) and reports per function how many compiles and why each recompile happened,
// cache-limit hits, compile time and suggestions. A thin main over dynamo::profiler
// (profile_report.h) and the programs' driver (cli/driver, tool_main.h); see docs/explain.md.
#include "dynamo/cli/tool_main.h"
#include "dynamo/profiler/profile_report.h"

using namespace dynamo::explain;
using namespace dynamo::cli;
using namespace dynamo::profiler;

int main(int argc, char** argv) {
  ToolSpec spec;
  spec.name = "dynamo-profile";
  spec.description =
      "Runs script.py in a fresh interpreter with graph capture and the trace store on, and\n"
      "reports per function how many compiles and why each recompile happened (the guard that\n"
      "failed, the value expected and seen, the user line that created the guard), cache-limit\n"
      "hits, compile time, and suggestions for the known patterns.";
  spec.flags = {{"--max-recompiles", "N", "exit 1 when a function recompiled more than N times"},
                {"--fail-on-cache-limit", "", "exit 1 when a function hit cache_size_limit"}};
  spec.render = [](const dynamo::storage::TraceReader& reader, RowId run, const ToolOptions& o,
                   const RenderOptions& render) {
    return renderProfile(buildProfileReport(reader, run), o.format, render);
  };
  spec.policy = [](const dynamo::storage::TraceReader& reader, RowId run, const ToolOptions& o,
                   const RenderOptions& render) {
    ProfilePolicy policy;
    if (o.flags.count("--max-recompiles"))
      policy.maxRecompiles = parseCount("--max-recompiles", o.flags.at("--max-recompiles"));
    policy.failOnCacheLimit = o.flags.count("--fail-on-cache-limit") > 0;
    return checkProfilePolicy(buildProfileReport(reader, run), policy, render);
  };
  return toolMain(spec, argc, argv, DYNAMO_PYTHON);
}
