// The shared driver of the report programs (dynamo-explain, dynamo-profile): option parsing,
// running the user's script under capture in a fresh interpreter, and exit codes. The programs
// in cli/ are a ToolSpec and one call to toolMain.
//
//   tool [options] script.py [args...]   run the script with the trace store on, then report
//   tool [options] --db trace.db         report from an existing store, run nothing
//
//   parent (this program)                      child: DYNAMO_PYTHON -m dynamo._run_script
//                                              ($DYNAMO_SCRIPT_PYTHON instead when set)
//   ---------------------                      ------------------------------------------
//   mkdtemp; fork/exec -------------------->   DYNAMO_TRACE=<tmp>/trace.db, status file
//   wait (SIGINT ignored)                      runs the script as __main__ (traceback to stderr)
//   read status; build report from the store   writes "done <exit code>" / "syntax_error ..."
//   print; policy; exit code
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dynamo/explain/explain_report.h"
#include "dynamo/explain/format.h"
#include "dynamo/storage/trace_reader.h"

namespace dynamo::cli {

// The driver renders dynamo::explain reports in its formats.
using namespace dynamo::explain;  // NOLINT(google-build-using-namespace)

/// Exit codes of the report programs (docs/explain.md).
inline constexpr int kExitOk = 0;            ///< report written, policy passed
inline constexpr int kExitPolicy = 1;        ///< a --max-breaks / --fullgraph / ... policy failed
inline constexpr int kExitScriptFailed = 2;  ///< the script raised or exited non-zero
inline constexpr int kExitBadInput = 3;      ///< missing script, syntax error, bad --db, no runner
inline constexpr int kExitUsage = 64;        ///< unknown option or bad option value (EX_USAGE)

/// An option only one tool takes (its policy flags).
struct ToolFlag {
  std::string name;       ///< "--max-breaks"
  std::string valueName;  ///< "N", or "" for a switch
  std::string help;       ///< one line
};

/// The parsed command line.
struct ToolOptions {
  Format format = Format::kText;            ///< --json --junit --markdown --sarif --format NAME
  bool masked = false;                      ///< --mask
  std::string output;                       ///< -o FILE; "" writes to stdout
  std::string db;                           ///< --db PATH
  std::string saveDb;                       ///< --save-db PATH: record the run there and keep it
  RowId runId = 0;                          ///< --run ID; 0: every run
  std::string capture = "auto";             ///< --capture-all: "all", --no-capture-all: "none"
  std::string rootDir;                      ///< --root DIR (default: working directory)
  std::map<std::string, std::string> flags; ///< the tool's own flags: name -> value ("" switch)
  std::string script;                       ///< the script; "" with --db
  std::vector<std::string> scriptArgs;      ///< its arguments
  bool help = false;                        ///< -h / --help
};

/// A report program.
struct ToolSpec {
  std::string name;                ///< "dynamo-explain"
  std::string description;         ///< one paragraph for --help
  std::vector<ToolFlag> flags;     ///< the tool's own options
  /// Renders the report over `reader` (run 0: every run).
  std::function<std::string(const storage::TraceReader&, RowId, const ToolOptions&,
                            const RenderOptions&)>
      render;
  /// Checks the tool's policy flags.
  std::function<PolicyResult(const storage::TraceReader&, RowId, const ToolOptions&,
                             const RenderOptions&)>
      policy;
};

/// A command-line mistake; what() is the message (without the usage text).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses argv[1..]; throws UsageError.
ToolOptions parseToolOptions(const ToolSpec& spec, const std::vector<std::string>& args);
/// The --help text.
std::string toolUsage(const ToolSpec& spec);
/// Parses a non-negative integer option value; throws UsageError naming the option.
std::int64_t parseCount(const std::string& option, const std::string& value);

/// How the script run went.
struct ScriptOutcome {
  enum class Kind { kOk, kFailed, kBadInput } kind = Kind::kOk;  ///< see the exit codes
  int exitCode = 0;     ///< the script's exit code (kFailed); 128+N for signal N
  std::string message;  ///< for kFailed / kBadInput, printed to stderr
};

/// Runs `script` with `python -m dynamo._run_script` recording into `dbPath` (see the banner).
/// The script's stdout goes to our stderr when the report goes to stdout.
ScriptOutcome runScript(const std::string& tool, const std::string& python,
                        const ToolOptions& options, const std::string& dbPath);

/// The whole program: parse, run or open, render, write, policy. Returns the exit code.
int toolMain(const ToolSpec& spec, int argc, char** argv, const std::string& python);

}  // namespace dynamo::cli
