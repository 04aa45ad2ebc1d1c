// Text helpers shared by the renderers (render_util.h).
#include "dynamo/explain/render_util.h"

#include <cctype>

#include "dynamo/storage/crash_marker.h"

namespace dynamo::explain {

std::string displayWhere(const std::string& file, int line, const RenderOptions& options) {
  return displayPath(file, options) + ":" + std::to_string(line);
}

std::string stackEntry(const std::string& entry, const RenderOptions& options) {
  // "file:line: source" or "file:line": the file ends at the last ':' followed by digits.
  for (size_t colon = entry.find(':'); colon != std::string::npos;
       colon = entry.find(':', colon + 1)) {
    size_t digits = colon + 1;
    while (digits < entry.size() && std::isdigit(static_cast<unsigned char>(entry[digits])))
      ++digits;
    if (digits > colon + 1 && (digits == entry.size() || entry[digits] == ':'))
      return displayPath(entry.substr(0, colon), options) + entry.substr(colon);
  }
  return entry;
}

std::string commandLine(const storage::RunRecord& run, const RenderOptions& options) {
  std::string out;
  for (const std::string& arg : run.argv) {
    if (!out.empty()) out += ' ';
    out += arg.find('/') != std::string::npos ? displayPath(arg, options) : arg;
  }
  return out;
}

std::string unfinishedRunNote(const storage::RunRecord& run) {
  if (run.endTimeUs != 0) return "";
  // A crash marker says how it ended (storage/include/dynamo/storage/crash_marker.h). The file
  // is shown as the caller put it in run.crash.frameFile (see crashedRunForDisplay).
  if (run.crash.signal != 0)
    return "the run did not finish cleanly: it " +
           storage::describeCrash(run.crash, run.crash.frameFile) +
           "; the compiles recorded up to then, their graphs included, are in the trace store, "
           "but the runtime hit counts are missing and the counts below may be low. Fix the "
           "crash and rerun it to the end (dynamo-trace compiles TRACE.db lists the compiles)";
  return "the run did not finish cleanly: its process ended without closing the trace store "
         "(os._exit, a crash or a kill) or is still running, so its last records and the "
         "runtime hit counts may be missing; the counts below may be low. Rerun it to the end, "
         "or call dynamo.trace.end_run() before os._exit";
}

std::string plural(std::int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

JunitSuite junitSuite(const std::string& tool, const std::string& name,
                      const storage::RunRecord& run, std::int64_t timeUs,
                      const RenderOptions& options) {
  JunitSuite suite;
  suite.name = name;
  // The script: the first argument after the runner's own ("-m dynamo._run_script ... --").
  std::string script = run.argv.empty() ? tool : run.argv.front();
  suite.package = displayPath(script, options);
  suite.hostname = run.hostname;
  suite.startTimeUs = run.startTimeUs;
  suite.timeUs = timeUs;
  auto masked = [&](const std::string& v) { return options.masked ? std::string("<masked>") : v; };
  suite.systemErr = unfinishedRunNote(run, options);
  suite.properties = {{"tool", tool},
                      {"command", commandLine(run, options)},
                      {"pid", masked(std::to_string(run.pid))},
                      {"python_version", masked(run.pythonVersion)},
                      {"torch_version", masked(run.torchVersion)},
                      {"dynamo_version", masked(run.dynamoVersion)}};
  return suite;
}

void jsonTime(JsonWriter& w, std::int64_t us, const RenderOptions& options) {
  if (options.masked) w.value("<time>");
  else w.value(us);
}

std::string unfinishedRunNote(const storage::RunRecord& run, const RenderOptions& options) {
  storage::RunRecord shown = run;
  shown.crash.frameFile = displayPath(run.crash.frameFile, options);
  return unfinishedRunNote(shown);
}

void jsonRun(JsonWriter& w, const storage::RunRecord& run, const RenderOptions& options) {
  w.key("run_id").value(run.id);
  w.key("finished_cleanly").value(run.endTimeUs != 0);
  // How the run ended (storage::describeRunEnd): closed, crashed (with what the marker says),
  // or did not close.
  const storage::RunCrash& c = run.crash;
  std::string file = displayPath(c.frameFile, options);
  w.key("crash").beginObject();
  w.key("ended").value(std::string(storage::runEndKind(run)));
  w.key("text").value(storage::describeRunEnd(run, file));
  if (run.endTimeUs == 0 && c.signal != 0) {
    w.key("signal").value(static_cast<std::int64_t>(c.signal));
    w.key("signal_name").value(storage::signalName(c.signal));
    w.key("stage").value(c.stage);
    if (c.compileId != 0 && c.attempt >= 0) {
      w.key("compile_id").value(c.compileId);
      w.key("attempt").value(static_cast<std::int64_t>(c.attempt));
      w.key("frame").value(c.frameName);
      w.key("file").value(file);
      w.key("line").value(static_cast<std::int64_t>(c.frameLine));
    }
    w.key("time_us");
    jsonTime(w, c.timeUs, options);
  }
  w.endObject();
  w.key("argv").beginArray();
  for (const std::string& arg : run.argv)
    w.value(arg.find('/') != std::string::npos ? displayPath(arg, options) : arg);
  w.endArray();
  if (options.masked) {
    w.key("pid").value("<masked>");
    w.key("hostname").value("<masked>");
    w.key("python_version").value("<masked>");
    w.key("torch_version").value("<masked>");
  } else {
    w.key("pid").value(run.pid);
    w.key("hostname").value(run.hostname);
    w.key("python_version").value(run.pythonVersion);
    w.key("torch_version").value(run.torchVersion);
  }
}

}  // namespace dynamo::explain
