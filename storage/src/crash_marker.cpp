// The fatal-signal handler that leaves a crash marker beside the trace store (crash_marker.h).
// Everything the handler touches is prepared by armCrashMarker(): a fixed path buffer and a few
// lock-free atomics. The handler formats integers by hand and calls only async-signal-safe
// functions.
#include "dynamo/storage/crash_marker.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <mutex>

namespace dynamo::storage {

namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
constexpr std::size_t kPathCapacity = 4096;

struct StageInfo {
  CrashStage stage;
  std::string_view name;
  std::string_view withCompile;
  std::string_view withoutCompile;
};

constexpr StageInfo kStages[] = {
#define DYNAMO_CRASH_STAGE(id, name, withCompile, without) \
  {CrashStage::id, name, withCompile, without},
#include "dynamo/storage/crash_stages.def"
#undef DYNAMO_CRASH_STAGE
};

// What the handler reads. The path is written only while armedPid is 0 (disarmed), so the
// handler never reads a half-written path.
char gMarkerPath[kPathCapacity];
std::atomic<pid_t> gArmedPid{0};
std::atomic<RowId> gArmedRun{0};
std::atomic<int> gStage{0};
std::atomic<RowId> gCompile{0};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<RowId>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

struct sigaction gPrevious[sizeof kFatalSignals / sizeof kFatalSignals[0]];
std::mutex gArmMutex;  // arm/disarm from several threads; never taken by the handler
bool gInstalled = false;

// Appends text or a decimal number to [p, end); async-signal-safe.
void put(char*& p, char* end, const char* s) {
  while (*s && p < end) *p++ = *s++;
}
void put(char*& p, char* end, std::int64_t v) {
  char digits[24];
  int n = 0;
  bool negative = v < 0;
  std::uint64_t u = negative ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  do {
    digits[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (negative && p < end) *p++ = '-';
  while (n > 0 && p < end) *p++ = digits[--n];
}

void writeMarker(int sig) {
  char text[256];
  char* p = text;
  char* end = text + sizeof text;
  timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  put(p, end, "dynamo-crash 1\nrun ");
  put(p, end, gArmedRun.load(std::memory_order_relaxed));
  put(p, end, "\nsignal ");
  put(p, end, static_cast<std::int64_t>(sig));
  put(p, end, "\nstage ");
  put(p, end, static_cast<std::int64_t>(gStage.load(std::memory_order_relaxed)));
  put(p, end, "\ncompile ");
  put(p, end, gCompile.load(std::memory_order_relaxed));
  put(p, end, "\ntime_us ");
  put(p, end, static_cast<std::int64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000);
  put(p, end, "\n");
  int fd = open(gMarkerPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const char* q = text;
  while (q < p) {
    ssize_t n = write(fd, q, static_cast<std::size_t>(p - q));
    if (n <= 0) break;
    q += n;
  }
  close(fd);
}

extern "C" void onFatalSignal(int sig, siginfo_t*, void*) {
  int savedErrno = errno;
  pid_t armed = gArmedPid.load(std::memory_order_acquire);
  // Only the first fatal signal of the process that armed the marker writes it.
  if (armed != 0 && armed == getpid() &&
      gArmedPid.compare_exchange_strong(armed, 0, std::memory_order_acq_rel))
    writeMarker(sig);
  // Put the previous handler (SIG_DFL, faulthandler's, ...) back and deliver the signal to it:
  // raised now, it is pending until this handler returns; a fault would also recur on return.
  for (std::size_t i = 0; i < sizeof kFatalSignals / sizeof kFatalSignals[0]; ++i)
    if (kFatalSignals[i] == sig) sigaction(sig, &gPrevious[i], nullptr);
  raise(sig);
  errno = savedErrno;
}

void installOnce() {
  if (gInstalled) return;
  gInstalled = true;
  for (std::size_t i = 0; i < sizeof kFatalSignals / sizeof kFatalSignals[0]; ++i) {
    struct sigaction action {};
    action.sa_sigaction = onFatalSignal;
    sigemptyset(&action.sa_mask);
    // SA_ONSTACK: use an alternate stack where one is set up (faulthandler's), so a stack
    // overflow still gets its marker.
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(kFatalSignals[i], &action, &gPrevious[i]);
  }
}

}  // namespace

std::string_view crashStageName(CrashStage stage) {
  for (const StageInfo& s : kStages)
    if (s.stage == stage) return s.name;
  return "unknown";
}

std::string describeCrash(const RunCrash& crash, const std::string& frameFile) {
  if (crash.signal == 0) return "";
  const StageInfo* info = &kStages[0];
  for (const StageInfo& s : kStages)
    if (s.name == crash.stage) info = &s;
  std::string out = "crashed (" + signalName(crash.signal) + ")";
  if (crash.compileId == 0 || crash.attempt < 0) return out + std::string(info->withoutCompile);
  std::string text(info->withCompile);
  std::string compile = "compile #" + std::to_string(crash.attempt) + " of frame " +
                        crash.frameName + " (" + frameFile + ":" +
                        std::to_string(crash.frameLine) + ")";
  std::size_t at = text.find("{compile}");
  if (at != std::string::npos) text.replace(at, 9, compile);
  return out + text;
}

std::string describeRunEnd(const RunRecord& run, const std::string& frameFile) {
  if (run.endTimeUs != 0) return "closed";
  if (run.crash.signal != 0) return describeCrash(run.crash, frameFile);
  return "did not close (still running, or killed)";
}

std::string_view runEndKind(const RunRecord& run) {
  if (run.endTimeUs != 0) return "closed";
  return run.crash.signal != 0 ? "crashed" : "did_not_close";
}

std::optional<CrashStage> crashStageFromName(std::string_view name) {
  for (const StageInfo& s : kStages)
    if (s.name == name) return s.stage;
  return std::nullopt;
}

std::string crashMarkerPath(const std::string& storePath, RowId runId) {
  return storePath + "-crash-" + std::to_string(runId);
}

void armCrashMarker(const std::string& storePath, RowId runId) {
  std::string path = crashMarkerPath(storePath, runId);
  if (!path.empty() && path[0] != '/') {
    // The handler must not depend on the working directory at the time of the crash.
    char cwd[kPathCapacity];
    if (getcwd(cwd, sizeof cwd) != nullptr) path = std::string(cwd) + "/" + path;
  }
  std::lock_guard<std::mutex> lock(gArmMutex);
  gArmedPid.store(0, std::memory_order_release);
  if (path.size() >= kPathCapacity) return;  // no marker for absurdly long paths
  std::memcpy(gMarkerPath, path.c_str(), path.size() + 1);
  gArmedRun.store(runId, std::memory_order_relaxed);
  gStage.store(static_cast<int>(CrashStage::kUnknown), std::memory_order_relaxed);
  gCompile.store(0, std::memory_order_relaxed);
  installOnce();
  gArmedPid.store(getpid(), std::memory_order_release);
}

void disarmCrashMarker(RowId runId) {
  std::lock_guard<std::mutex> lock(gArmMutex);
  if (gArmedRun.load(std::memory_order_relaxed) == runId)
    gArmedPid.store(0, std::memory_order_release);
}

void noteCrashStage(CrashStage stage, RowId compileId) {
  gCompile.store(compileId, std::memory_order_relaxed);
  gStage.store(static_cast<int>(stage), std::memory_order_relaxed);
}

std::optional<CrashMarker> parseCrashMarker(std::string_view text) {
  constexpr std::string_view kHeader = "dynamo-crash 1\n";
  if (text.substr(0, kHeader.size()) != kHeader) return std::nullopt;
  text.remove_prefix(kHeader.size());
  CrashMarker m;
  int seen = 0;
  while (!text.empty()) {
    std::size_t eol = text.find('\n');
    if (eol == std::string_view::npos) return std::nullopt;  // torn: the last line is cut
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol + 1);
    std::size_t space = line.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    std::string_view key = line.substr(0, space), value = line.substr(space + 1);
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || ptr != value.data() + value.size()) return std::nullopt;
    if (key == "run") m.runId = v, seen |= 1;
    else if (key == "signal") m.signal = static_cast<int>(v), seen |= 2;
    else if (key == "stage") {
      m.stage = v >= 0 && v < static_cast<std::int64_t>(std::size(kStages))
                    ? static_cast<CrashStage>(v) : CrashStage::kUnknown;
      seen |= 4;
    } else if (key == "compile") m.compileId = v, seen |= 8;
    else if (key == "time_us") m.timeUs = v, seen |= 16;
  }
  if (seen != 31 || m.runId <= 0 || m.signal <= 0) return std::nullopt;
  return m;
}

std::string formatCrashMarker(const CrashMarker& m) {
  return "dynamo-crash 1\nrun " + std::to_string(m.runId) + "\nsignal " +
         std::to_string(m.signal) + "\nstage " + std::to_string(static_cast<int>(m.stage)) +
         "\ncompile " + std::to_string(m.compileId) + "\ntime_us " + std::to_string(m.timeUs) +
         "\n";
}

std::string signalName(int signal) {
  switch (signal) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace dynamo::storage
