// Helpers shared by the storage tests: scratch directories, file bytes, raw SQL for building
// files the store must refuse, and running trace_writer_child.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dynamo::storage::testing {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  /// path() + "/" + name
  std::string file(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The whole content of a file ("" when missing).
std::string readFile(const std::string& path);
/// Writes `content` to `path`, replacing it.
void writeFile(const std::string& path, const std::string& content);
/// True when `path` exists.
bool fileExists(const std::string& path);
/// Runs SQL on a file with a plain SQLite connection (tests only; throws std::runtime_error).
void rawExec(const std::string& path, const std::string& sql);
/// Runs a one-integer query on a file with a plain SQLite connection.
std::int64_t rawQueryInt(const std::string& path, const std::string& sql);

/// A running trace_writer_child with its stdout on a pipe.
struct Child {
  pid_t pid = -1;  ///< process id
  int out = -1;    ///< read end of its stdout
};
/// Starts trace_writer_child with `args`.
Child startChild(const std::vector<std::string>& args);
/// Reads one line from the child's stdout; false at end of file.
bool readLine(Child& child, std::string& line);
/// Waits for the child; returns the raw wait status.
int waitChild(Child& child);

/// A start line for child processes: each child blocks reading one byte from readFd() (passed
/// as an argument; the descriptor is inherited across exec) until release() writes one byte per
/// child. The write end is close-on-exec, so destroying the barrier unblocks children with EOF.
class StartBarrier {
 public:
  StartBarrier();
  ~StartBarrier();
  StartBarrier(const StartBarrier&) = delete;
  StartBarrier& operator=(const StartBarrier&) = delete;
  /// The descriptor children read, as an argument string.
  std::string readFd() const;
  /// Lets `children` waiting children go at once.
  void release(int children);

 private:
  int fds_[2] = {-1, -1};
};

}  // namespace dynamo::storage::testing
