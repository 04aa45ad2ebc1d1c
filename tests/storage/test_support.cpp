// Helpers shared by the storage tests (see test_support.h).
#include "test_support.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dynamo::storage::testing {

ScratchDir::ScratchDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/dynamo-storage-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ScratchDir::file(const std::string& name) const { return path_ + "/" + name; }

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void writeFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

bool fileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

namespace {
struct RawDb {
  sqlite3* db = nullptr;
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK)
      throw std::runtime_error("sqlite3_open failed: " + path);
  }
  ~RawDb() { sqlite3_close(db); }
};
}  // namespace

void rawExec(const std::string& path, const std::string& sql) {
  RawDb raw(path);
  char* err = nullptr;
  if (sqlite3_exec(raw.db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = err != nullptr ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error("rawExec: " + message);
  }
}

std::int64_t rawQueryInt(const std::string& path, const std::string& sql) {
  RawDb raw(path);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(raw.db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK)
    throw std::runtime_error(std::string("rawQueryInt: ") + sqlite3_errmsg(raw.db));
  std::int64_t value = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
  sqlite3_finalize(stmt);
  return value;
}

Child startChild(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    std::string exe = DYNAMO_TRACE_WRITER_CHILD;
    argv.push_back(exe.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

bool readLine(Child& child, std::string& line) {
  line.clear();
  char c;
  for (;;) {
    ssize_t n = read(child.out, &c, 1);
    if (n <= 0) return false;  // a line cut short by a kill was never acknowledged
    if (c == '\n') return true;
    line += c;
  }
}

int waitChild(Child& child) {
  int status = 0;
  waitpid(child.pid, &status, 0);
  if (child.out >= 0) close(child.out);
  child.out = -1;
  return status;
}

StartBarrier::StartBarrier() {
  if (pipe(fds_) != 0) throw std::runtime_error("pipe failed");
  // Children inherit only the read end; otherwise closing ours would never reach them as EOF.
  if (fcntl(fds_[1], F_SETFD, FD_CLOEXEC) != 0) throw std::runtime_error("fcntl failed");
}

StartBarrier::~StartBarrier() {
  close(fds_[0]);
  close(fds_[1]);
}

std::string StartBarrier::readFd() const { return std::to_string(fds_[0]); }

void StartBarrier::release(int children) {
  std::string bytes(static_cast<size_t>(children), 'g');
  if (write(fds_[1], bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    throw std::runtime_error("writing to the start barrier failed");
}

}  // namespace dynamo::storage::testing
