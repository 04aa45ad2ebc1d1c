// dynamo-explain: runs a script with capture and the trace store on (or reads --db) and reports
// per compiled function its graphs, distinct graph breaks with occurrence counts, guards and
// compile times. A thin main: the report and the driver live in dynamo::explain
// (explain_report.h, tool_main.h); docs/explain.md describes options, formats and exit codes.
#include "dynamo/explain/explain_report.h"
#include "dynamo/cli/tool_main.h"

using namespace dynamo::explain;
using namespace dynamo::cli;

int main(int argc, char** argv) {
  ToolSpec spec;
  spec.name = "dynamo-explain";
  spec.description =
      "Runs script.py in a fresh interpreter with graph capture and the trace store on, and\n"
      "reports per compiled function: its graphs (op counts), its graph breaks deduplicated by\n"
      "kind and location with occurrence counts and the first user stack, guards and compile\n"
      "times. The script's output goes to stderr when the report goes to stdout.";
  spec.flags = {{"--max-breaks", "N", "exit 1 when there are more than N distinct graph breaks"},
                {"--fullgraph", "", "exit 1 on any graph break"}};
  spec.render = [](const dynamo::storage::TraceReader& reader, RowId run, const ToolOptions& o,
                   const RenderOptions& render) {
    return renderExplain(buildExplainReport(reader, run), o.format, render);
  };
  spec.policy = [](const dynamo::storage::TraceReader& reader, RowId run, const ToolOptions& o,
                   const RenderOptions& render) {
    ExplainPolicy policy;
    if (o.flags.count("--max-breaks")) policy.maxBreaks = parseCount("--max-breaks", o.flags.at("--max-breaks"));
    policy.fullgraph = o.flags.count("--fullgraph") > 0;
    return checkExplainPolicy(buildExplainReport(reader, run), policy, render);
  };
  return toolMain(spec, argc, argv, DYNAMO_PYTHON);
}
