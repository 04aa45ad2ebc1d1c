// RAII wrappers over sqlite3* and sqlite3_stmt* (private to dynamo::storage: SQL lives here
// only). Every SQLite failure becomes a UserError(kTraceStore) that names the file, what we were
// doing, SQLite's message, and a fix chosen from the result code.
//
// Several processes open one file at once, so no connection may run a statement without a busy
// handler: the constructor takes the busy timeout and installs it before anything else can run.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "dynamo/common/error.h"

namespace dynamo::storage::sql {

/// A UserError(kTraceStore) raised by SQLite, keeping its result code for callers that classify.
class SqliteError : public UserError {
 public:
  SqliteError(int rc, std::string summary, std::string explanation, std::string hint)
      : UserError(UserErrorKind::kTraceStore, std::move(summary), SourceLocation{},
                  std::move(explanation), std::move(hint)),
        rc_(rc) {}
  /// The primary SQLite result code (SQLITE_NOTADB, SQLITE_BUSY, ...).
  int resultCode() const { return rc_ & 0xff; }
  /// The extended result code (SQLITE_READONLY_ROLLBACK, SQLITE_BUSY_RECOVERY, ...).
  int extendedCode() const { return rc_; }

 private:
  int rc_;
};

/// Throws the UserError for SQLite result code `rc` while doing `what` on `path`.
[[noreturn]] void throwSqlite(sqlite3* db, int rc, const std::string& path, std::string_view what);

/// An open connection; closed on destruction.
class Database {
 public:
  Database() = default;
  /// Opens `path` with sqlite3_open_v2 `flags` and sets the busy timeout to `busyTimeoutMs`
  /// before any statement can run; throws on failure.
  Database(const std::string& path, int flags, int busyTimeoutMs);
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }
  /// Runs one or more statements without results; throws on failure.
  void exec(const char* sql, std::string_view what);
  /// Runs a statement returning one integer (a PRAGMA or a count).
  std::int64_t queryInt(const char* sql);
  /// Runs a statement returning one text value ("" when no row).
  std::string queryText(const char* sql);
  /// The busy timeout in milliseconds given at open.
  int busyTimeoutMs() const { return busyTimeoutMs_; }
  /// Calls `attempt` (one SQLite operation returning a result code) again while it returns
  /// SQLITE_BUSY, with short sleeps, until busyTimeoutMs() has passed since the first call;
  /// returns the last result code. The busy handler already waits inside most calls; this covers
  /// the ones where SQLite answers SQLITE_BUSY at once (deadlock avoidance, a journal-mode switch
  /// racing another opener, WAL recovery by another process).
  int retryWhileBusy(const std::function<int()>& attempt);
  /// exec() of one statement, retried with retryWhileBusy(); throws on failure.
  void execRetryingBusy(const char* sql, std::string_view what);
  /// Closes now (idempotent).
  void close();

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  int busyTimeoutMs_ = 0;
};

/// A prepared statement; finalized on destruction.
class Statement {
 public:
  Statement() = default;
  Statement(Database& db, const char* sql);
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  /// Binders; indices are 1-based as in SQLite.
  Statement& bind(int index, std::int64_t value);
  Statement& bindText(int index, std::string_view value);
  Statement& bindBlob(int index, std::string_view value);
  Statement& bindNull(int index);
  /// Binds value, or NULL when it is 0 (optional references such as compile_id).
  Statement& bindIdOrNull(int index, std::int64_t value);

  /// Steps once: true when a row is available, false when done. Throws on error.
  bool step();
  /// Steps once and returns SQLite's result code (SQLITE_ROW, SQLITE_DONE, or an error, after
  /// which the statement is reset); never throws. For callers that retry on SQLITE_BUSY.
  int tryStep();
  /// Steps a statement that returns no rows, then resets it for reuse.
  void run();
  /// Resets the statement and clears its bindings.
  void reset();

  /// Column getters (0-based); NULL reads as 0 or "".
  std::int64_t columnInt(int index) const;
  std::string columnText(int index) const;

 private:
  Database* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace dynamo::storage::sql
