// runScript: runs the user's script in a fresh interpreter with capture and the trace store on
// (tool_main.h). The child is `python -m dynamo._run_script`; it reports through a status file:
//   started                              the runner is up (missing: it could not start)
//   syntax_error<TAB>line<TAB>msg<TAB>text   the script does not compile
//   unreadable<TAB>msg                     the script cannot be read
//   done<TAB>code                          the script finished with this exit code
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dynamo/cli/tool_main.h"

extern char** environ;

namespace dynamo::cli {

namespace {

std::vector<std::string> splitTabs(const std::string& line) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(line);
  while (std::getline(in, part, '\t')) parts.push_back(part);
  return parts;
}

// The last line of the status file ("" when there is none).
std::string lastStatus(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

std::vector<std::string> childEnvironment(const std::string& db, const std::string& status) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("DYNAMO_TRACE=", 0) == 0 || kv.rfind("DYNAMO_RUN_STATUS=", 0) == 0) continue;
    env.push_back(kv);
  }
  env.push_back("DYNAMO_TRACE=" + db);
  env.push_back("DYNAMO_RUN_STATUS=" + status);
  return env;
}

std::vector<char*> cStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Waits for the child with SIGINT/SIGQUIT ignored (the child gets them and fails), returns the
// wait status.
int waitChild(pid_t pid) {
  struct sigaction ignore{}, oldInt{}, oldQuit{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &oldInt);
  sigaction(SIGQUIT, &ignore, &oldQuit);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGQUIT, &oldQuit, nullptr);
  return status;
}

}  // namespace

ScriptOutcome runScript(const std::string& tool, const std::string& python,
                        const ToolOptions& options, const std::string& dbPath) {
  std::string dir = dbPath.substr(0, dbPath.rfind('/') == std::string::npos ? 0 : dbPath.rfind('/'));
  std::string statusPath = (dir.empty() ? std::string(".") : dir) + "/status";
  if (!options.saveDb.empty()) statusPath = dbPath + ".status";
  unlink(statusPath.c_str());

  std::vector<std::string> args = {python, "-m", "dynamo._run_script", "--tool", tool,
                                   "--capture", options.capture, "--", options.script};
  args.insert(args.end(), options.scriptArgs.begin(), options.scriptArgs.end());
  std::vector<std::string> env = childEnvironment(dbPath, statusPath);
  std::vector<char*> argv = cStrings(args), envp = cStrings(env);

  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return {ScriptOutcome::Kind::kBadInput, 0, tool + ": cannot start " + python + ": " + std::strerror(errno) + "\n"};
  if (pid == 0) {
    // The report owns stdout unless it goes to a file: the script prints to stderr.
    if (options.output.empty()) dup2(STDERR_FILENO, STDOUT_FILENO);
    execve(python.c_str(), argv.data(), envp.data());
    std::fprintf(stderr, "%s: cannot start %s: %s\n", tool.c_str(), python.c_str(), std::strerror(errno));
    _exit(127);
  }
  int status = waitChild(pid);
  std::vector<std::string> s = splitTabs(lastStatus(statusPath));
  unlink(statusPath.c_str());
  if (s.empty()) {
    return {ScriptOutcome::Kind::kBadInput, 0,
            tool + ": the Python runner did not start (" + python +
                " -m dynamo._run_script); is the dynamo package importable (PYTHONPATH)?\n"};
  }
  if (s[0] == "syntax_error") {
    std::string msg = tool + ": cannot run '" + options.script + "': syntax error at line " +
                      (s.size() > 1 ? s[1] : "?") + ": " + (s.size() > 2 ? s[2] : "") + "\n";
    if (s.size() > 3 && !s[3].empty()) msg += "   |  " + s[3] + "\n";
    return {ScriptOutcome::Kind::kBadInput, 0, msg};
  }
  if (s[0] == "unreadable")
    return {ScriptOutcome::Kind::kBadInput, 0,
            tool + ": cannot run '" + options.script + "': " + (s.size() > 1 ? s[1] : "") + "\n"};
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (s[0] == "done" && s.size() > 1 && code == 0) code = std::atoi(s[1].c_str());
  if (code == 0) return {};
  std::string how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                        : "failed (exit code " + std::to_string(code) + ")";
  return {ScriptOutcome::Kind::kFailed, code,
          tool + ": the script " + how + "; the report covers what ran before that\n"};
}

}  // namespace dynamo::cli
