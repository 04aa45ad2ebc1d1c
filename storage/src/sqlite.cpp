// RAII wrappers over the SQLite C API, and the mapping of SQLite errors to user errors.
#include "sqlite.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "dynamo/common/error.h"

namespace dynamo::storage::sql {

namespace {
std::string hintFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return "free disk space on that file system, or write the trace to another one";
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return "another process held the trace store's write lock too long; give each job its own "
             "file, or retry when it is done";
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
      return "pass a path in a writable directory (DYNAMO_TRACE=/tmp/trace.db, or "
             "dynamo.trace.start_run(path))";
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return "this file is damaged or is not a trace store; pass a new file name";
    case SQLITE_IOERR:
      return "check the disk and the file system holding the file";
    default:
      return "this is unexpected; please report it with this message";
  }
}
}  // namespace

void throwSqlite(sqlite3* db, int rc, const std::string& path, std::string_view what) {
  std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw SqliteError(rc, detail::concat("trace store '", path, "': ", what, " failed: ", message),
                    detail::concat("SQLite result code ", rc), hintFor(rc));
}

Database::Database(const std::string& path, int flags, int busyTimeoutMs)
    : path_(path), busyTimeoutMs_(busyTimeoutMs) {
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    // sqlite3_open_v2 may allocate a handle even on failure; it must be closed.
    std::string message = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SqliteError(rc, detail::concat("cannot open trace store '", path, "': ", message),
                      detail::concat("SQLite result code ", rc), hintFor(rc));
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, busyTimeoutMs_);
}

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      path_(std::move(other.path_)),
      busyTimeoutMs_(other.busyTimeoutMs_) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    close();
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
    busyTimeoutMs_ = other.busyTimeoutMs_;
  }
  return *this;
}

Database::~Database() { close(); }

void Database::close() {
  if (db_ != nullptr) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
}

void Database::exec(const char* sql, std::string_view what) {
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) throwSqlite(db_, rc, path_, what);
}

std::int64_t Database::queryInt(const char* sql) {
  Statement s(*this, sql);
  return s.step() ? s.columnInt(0) : 0;
}

std::string Database::queryText(const char* sql) {
  Statement s(*this, sql);
  return s.step() ? s.columnText(0) : std::string();
}

int Database::retryWhileBusy(const std::function<int()>& attempt) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(busyTimeoutMs_);
  std::chrono::milliseconds pause(1);
  for (;;) {
    int rc = attempt();
    if ((rc & 0xff) != SQLITE_BUSY || Clock::now() >= deadline) return rc;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void Database::execRetryingBusy(const char* sql, std::string_view what) {
  int rc = retryWhileBusy([&] { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); });
  if (rc != SQLITE_OK) throwSqlite(db_, rc, path_, what);
}

Statement::Statement(Database& db, const char* sql) : db_(&db) {
  int rc = sqlite3_prepare_v2(db.get(), sql, -1, &stmt_, nullptr);
  if (rc != SQLITE_OK) throwSqlite(db.get(), rc, db.path(), detail::concat("preparing '", sql, "'"));
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, std::int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::bindText(int index, std::string_view value) {
  sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Statement& Statement::bindBlob(int index, std::string_view value) {
  sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::bindNull(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

Statement& Statement::bindIdOrNull(int index, std::int64_t value) {
  return value == 0 ? bindNull(index) : bind(index, value);
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string sql = sqlite3_sql(stmt_) != nullptr ? sqlite3_sql(stmt_) : "";
  sqlite3_reset(stmt_);
  throwSqlite(db_->get(), rc, db_->path(), detail::concat("running '", sql, "'"));
}

int Statement::tryStep() {
  int rc = sqlite3_step(stmt_);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) sqlite3_reset(stmt_);
  return rc;
}

void Statement::run() {
  step();
  reset();
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::int64_t Statement::columnInt(int index) const { return sqlite3_column_int64(stmt_, index); }

std::string Statement::columnText(int index) const {
  // Blob access works for TEXT and BLOB columns alike and keeps embedded NUL bytes.
  const void* data = sqlite3_column_blob(stmt_, index);
  int size = sqlite3_column_bytes(stmt_, index);
  if (data == nullptr) return {};
  return std::string(static_cast<const char*>(data), static_cast<size_t>(size));
}

}  // namespace dynamo::storage::sql
