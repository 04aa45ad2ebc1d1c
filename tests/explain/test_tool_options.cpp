// Option parsing of the report programs (tool_main.h): every usage error's exact message.
#include "dynamo/cli/tool_main.h"
#include "dynamo_catch.h"

using namespace dynamo::explain;
using namespace dynamo::cli;

namespace {

ToolSpec spec() {
  ToolSpec s;
  s.name = "dynamo-explain";
  s.flags = {{"--max-breaks", "N", "limit"}, {"--fullgraph", "", "any break fails"}};
  return s;
}

std::string usageError(std::vector<std::string> args) {
  try {
    parseToolOptions(spec(), args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("options before the script, the rest are the script's") {
  ToolOptions o = parseToolOptions(spec(), {"--sarif", "--max-breaks", "3", "--fullgraph",
                                            "train.py", "--lr", "0.1"});
  CHECK(o.format == Format::kSarif);
  CHECK(o.flags.at("--max-breaks") == "3");
  CHECK(o.flags.count("--fullgraph") == 1);
  CHECK(o.script == "train.py");
  CHECK(o.scriptArgs == std::vector<std::string>{"--lr", "0.1"});
  CHECK(parseToolOptions(spec(), {"--", "-odd.py"}).script == "-odd.py");
  ToolOptions db = parseToolOptions(spec(), {"--db", "t.db", "--run", "2", "--format", "junit"});
  CHECK(db.db == "t.db");
  CHECK(db.runId == 2);
  CHECK(db.format == Format::kJunit);
  CHECK(parseToolOptions(spec(), {"--capture-all", "a.py"}).capture == "all");
}

TEST_CASE("usage errors name the option") {
  CHECK(usageError({"--bogus", "a.py"}) == "unknown option '--bogus'");
  CHECK(usageError({"--max-breaks", "x", "a.py"}) == "--max-breaks needs a non-negative integer, got 'x'");
  CHECK(usageError({"--max-breaks", "-1", "a.py"}) == "--max-breaks needs a non-negative integer, got '-1'");
  CHECK(usageError({"--db"}) == "--db needs a value");
  CHECK(usageError({"--format", "pdf", "a.py"}) == "unknown format 'pdf' (text, json, junit, markdown, sarif)");
  CHECK(usageError({}) == "no script to run (or --db PATH) given");
  CHECK(usageError({"--db", "t.db", "a.py"}) ==
        "--db reports from an existing store and runs nothing; drop the script 'a.py' or the --db option");
  CHECK(usageError({"--db", "t.db", "--save-db", "u.db"}) ==
        "--save-db records a new run; it cannot be combined with --db");
}

TEST_CASE("the usage text lists the tool's flags and the exit codes") {
  std::string usage = toolUsage(spec());
  CHECK(usage.find("  --max-breaks N") != std::string::npos);
  CHECK(usage.find("exit codes: 0 ok, 1 policy failed, 2 the script failed, 3 bad input") != std::string::npos);
}
