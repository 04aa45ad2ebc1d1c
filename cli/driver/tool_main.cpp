// toolMain and option parsing of the report programs (tool_main.h).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dynamo/common/error.h"
#include "dynamo/cli/tool_main.h"

namespace dynamo::cli {

std::int64_t parseCount(const std::string& option, const std::string& value) {
  char* end = nullptr;
  long long n = value.empty() ? -1 : std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n < 0)
    throw UsageError(option + " needs a non-negative integer, got '" + value + "'");
  return n;
}

std::string toolUsage(const ToolSpec& spec) {
  std::ostringstream out;
  out << "usage: " << spec.name << " [options] script.py [args...]\n"
      << "       " << spec.name << " [options] --db trace.db\n\n"
      << spec.description << "\n\noptions:\n";
  auto line = [&](const std::string& flag, const std::string& help) {
    out << "  " << flag << std::string(flag.size() < 22 ? 22 - flag.size() : 1, ' ') << help << "\n";
  };
  line("--json", "JSON report");
  line("--junit", "JUnit XML (one test case per compiled function)");
  line("--markdown", "Markdown, for a pull-request comment");
  line("--sarif", "SARIF 2.1.0, for code-scanning annotations");
  line("--format NAME", "text, json, junit, markdown or sarif (text by default)");
  for (const ToolFlag& f : spec.flags)
    line(f.name + (f.valueName.empty() ? "" : " " + f.valueName), f.help);
  line("--db PATH", "report from an existing trace store; run nothing");
  line("--run ID", "only this run of the store (default: every run)");
  line("--save-db PATH", "record into PATH and keep it (default: a temporary store)");
  line("--capture-all", "compile everything the script runs (dynamo.optimize(\"eager\"))");
  line("--no-capture-all", "compile only what the script compiles itself");
  line("", "default: --capture-all unless the script imports dynamo");
  line("-o FILE", "write the report to FILE (the script's output then stays on stdout)");
  line("--root DIR", "show files under DIR relative to it (default: the working directory)");
  line("--mask", "mask times, pids, hosts and directories (golden tests)");
  line("-h, --help", "this text");
  out << "\nexit codes: 0 ok, 1 policy failed, 2 the script failed, 3 bad input (missing script,\n"
         "syntax error, not a trace store), 64 bad command line.\n";
  return out.str();
}

ToolOptions parseToolOptions(const ToolSpec& spec, const std::vector<std::string>& args) {
  ToolOptions o;
  size_t i = 0;
  auto valueOf = [&](const std::string& option) -> std::string {
    if (i + 1 >= args.size()) throw UsageError(option + " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;  // the script
    std::optional<Format> f = a.size() > 2 ? formatFromName(a.substr(2)) : std::nullopt;
    if (f && *f != Format::kText) o.format = *f;
    else if (a == "--format") {
      std::string name = valueOf(a);
      std::optional<Format> named = formatFromName(name);
      if (!named) throw UsageError("unknown format '" + name + "' (text, json, junit, markdown, sarif)");
      o.format = *named;
    } else if (a == "--mask") o.masked = true;
    else if (a == "-o" || a == "--output") o.output = valueOf(a);
    else if (a == "--db") o.db = valueOf(a);
    else if (a == "--save-db") o.saveDb = valueOf(a);
    else if (a == "--run") o.runId = parseCount(a, valueOf(a));
    else if (a == "--capture-all") o.capture = "all";
    else if (a == "--no-capture-all") o.capture = "none";
    else if (a == "--root") o.rootDir = valueOf(a);
    else if (a == "-h" || a == "--help") o.help = true;
    else {
      bool known = false;
      for (const ToolFlag& flag : spec.flags) {
        if (flag.name != a) continue;
        known = true;
        o.flags[a] = flag.valueName.empty() ? "" : valueOf(a);
        if (flag.valueName == "N") parseCount(a, o.flags[a]);  // checked before the script runs
      }
      if (!known) throw UsageError("unknown option '" + a + "'");
    }
  }
  if (o.help) return o;
  if (i < args.size()) {
    o.script = args[i];
    o.scriptArgs.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  }
  if (!o.db.empty() && !o.script.empty())
    throw UsageError("--db reports from an existing store and runs nothing; drop the script '" +
                     o.script + "' or the --db option");
  if (!o.db.empty() && !o.saveDb.empty())
    throw UsageError("--save-db records a new run; it cannot be combined with --db");
  if (o.db.empty() && o.script.empty()) throw UsageError("no script to run (or --db PATH) given");
  return o;
}

namespace {

std::string currentDir() {
  char buf[4096];
  return getcwd(buf, sizeof buf) != nullptr ? std::string(buf) : std::string();
}

// --root as an absolute directory (the store records absolute files); the working directory
// by default.
std::string rootDirOf(const ToolOptions& o) {
  if (o.rootDir.empty()) return currentDir();
  std::string root = o.rootDir[0] == '/' ? o.rootDir : currentDir() + "/" + o.rootDir;
  char resolved[PATH_MAX];
  if (realpath(root.c_str(), resolved) != nullptr) root = resolved;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

// A temporary directory for the store, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/dynamo-report-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path = buf.data();
  }
  ~TempDir() {
    if (path.empty()) return;
    // The store, its -wal and -shm, and what a script that crashed leaves beside it (crash
    // markers, row journals no reader recovered): the directory holds nothing else.
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
          unlink((path + "/" + e->d_name).c_str());
      closedir(d);
    }
    rmdir(path.c_str());
  }
};

bool writeOutput(const ToolSpec& spec, const ToolOptions& o, const std::string& text) {
  if (o.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  std::ofstream out(o.output, std::ios::binary);
  out << text;
  if (!out) {
    std::fprintf(stderr, "%s: cannot write the report to '%s' (pass -o with a writable path)\n",
                 spec.name.c_str(), o.output.c_str());
    return false;
  }
  return true;
}

// Why the report cannot be written to `path` ("" when it can), found before anything runs.
std::string outputProblem(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "it is a directory (pass -o with a file name)";
    if (access(path.c_str(), W_OK) != 0)
      return "it is not writable (pass -o with a writable path)";
    return "";
  }
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (stat(dir.c_str(), &st) != 0)
    return "directory '" + dir + "' does not exist (create it, or pass -o with a path in an "
           "existing directory)";
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory (pass -o with a writable path)";
  if (access(dir.c_str(), W_OK) != 0)
    return "directory '" + dir + "' is not writable (pass -o with a writable path)";
  return "";
}

// Renders the store at `path`, writes it, applies the policy. Returns the exit code.
int report(const ToolSpec& spec, const ToolOptions& o, const std::string& path, RowId runId) {
  auto reader = storage::TraceReader::open(path);
  RenderOptions render{o.masked, rootDirOf(o)};
  std::string text = spec.render(*reader, runId, o, render);
  if (!writeOutput(spec, o, text)) return kExitBadInput;
  PolicyResult policy = spec.policy ? spec.policy(*reader, runId, o, render) : PolicyResult{};
  if (policy.code != 0) std::fputs(policy.message.c_str(), stderr);
  return policy.code != 0 ? kExitPolicy : kExitOk;
}

int runAndReport(const ToolSpec& spec, const ToolOptions& o, const std::string& python) {
  if (access(o.script.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "%s: cannot run '%s': %s\n", spec.name.c_str(), o.script.c_str(),
                 errno == ENOENT ? "no such file" : std::strerror(errno));
    return kExitBadInput;
  }
  TempDir tmp;
  if (o.saveDb.empty() && tmp.path.empty()) {
    std::fprintf(stderr, "%s: cannot create a temporary directory (set TMPDIR, or pass --save-db PATH)\n",
                 spec.name.c_str());
    return kExitBadInput;
  }
  std::string db = o.saveDb.empty() ? tmp.path + "/trace.db" : o.saveDb;
  RowId lastRunBefore = 0;
  if (!o.saveDb.empty() && access(db.c_str(), F_OK) == 0) {
    auto before = storage::TraceReader::open(db);  // also refuses a file that is not a store
    for (const storage::RunRecord& r : before->runs()) lastRunBefore = std::max(lastRunBefore, r.id);
  }
  ScriptOutcome outcome = runScript(spec.name, python, o, db);
  if (outcome.kind == ScriptOutcome::Kind::kBadInput) {
    std::fputs(outcome.message.c_str(), stderr);
    return kExitBadInput;
  }
  int code = kExitOk;
  if (access(db.c_str(), F_OK) == 0) {
    // With --save-db an older store may hold earlier runs: report the runs this script added.
    RowId runId = o.runId;
    if (runId == 0 && lastRunBefore != 0) {
      auto reader = storage::TraceReader::open(db);
      for (const storage::RunRecord& r : reader->runs())
        if (r.id > lastRunBefore && runId == 0) runId = r.id;
    }
    code = report(spec, o, db, runId);
  } else {
    std::fprintf(stderr, "%s: the script recorded nothing (no trace store was written)\n",
                 spec.name.c_str());
  }
  if (outcome.kind == ScriptOutcome::Kind::kFailed) {
    std::fputs(outcome.message.c_str(), stderr);
    return kExitScriptFailed;
  }
  return code;
}

}  // namespace

int toolMain(const ToolSpec& spec, int argc, char** argv, const std::string& python) {
  ToolOptions o;
  try {
    o = parseToolOptions(spec, std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", spec.name.c_str(), e.what(), toolUsage(spec).c_str());
    return kExitUsage;
  }
  if (o.help) {
    std::fputs(toolUsage(spec).c_str(), stdout);
    return kExitOk;
  }
  if (!o.output.empty()) {
    std::string problem = outputProblem(o.output);
    if (!problem.empty()) {
      std::fprintf(stderr, "%s: cannot write the report to '%s': %s%s\n", spec.name.c_str(),
                   o.output.c_str(), problem.c_str(),
                   o.db.empty() ? "; the script was not run" : "");
      return kExitBadInput;
    }
  }
  // DYNAMO_SCRIPT_PYTHON: another interpreter for the script (the tests' forked stand-in,
  // tests/python/pyfork.py); it must take python's `-m module args` command line.
  const char* scriptPython = std::getenv("DYNAMO_SCRIPT_PYTHON");
  try {
    if (!o.db.empty()) return report(spec, o, o.db, o.runId);
    return runAndReport(spec, o, scriptPython != nullptr && *scriptPython != '\0' ? scriptPython : python);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", spec.name.c_str(), e.what(), toolUsage(spec).c_str());
    return kExitUsage;
  } catch (const UserError& e) {
    std::fprintf(stderr, "%s: %s\n", spec.name.c_str(), e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error (a Dynamo bug, please report it): %s\n",
                 spec.name.c_str(), e.what());
    return 70;  // EX_SOFTWARE
  }
}

}  // namespace dynamo::cli
