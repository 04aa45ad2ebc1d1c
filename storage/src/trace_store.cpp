// The trace store file: validation before any write, WAL setup, and the numbered schema
// migrations. To add a schema version: append a Migration to kMigrations (never edit a shipped
// one), bump kSchemaVersion in trace_store.h, teach the reader/writer the new columns, and add a
// test that opens a file of the previous version (see tests/storage/test_migration.cpp).
//
// Several processes may open one file at the same moment ("Concurrent opening" in
// docs/trace-store.md). The states another opener can see are only these:
//
//   no file / 0 bytes --(one writer: BEGIN IMMEDIATE; schema; user_version; COMMIT)-->
//   complete store, rollback journal --(PRAGMA journal_mode = WAL)--> complete store, WAL
//
// and a migration is one transaction too. Every connection has a busy handler before its first
// statement, and classification reads one snapshot, so nobody mistakes a store being created for
// something else or fails on a lock that another opener holds for a moment.
#include "dynamo/storage/trace_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>

#include "dynamo/common/error.h"
#include "store_file.h"

namespace dynamo::storage {

namespace {

struct Migration {
  int toVersion;        // user_version after this migration
  const char* summary;  // one line for docs and `dynamo-trace schema`
  const char* sql;      // statements, run inside the opening transaction
};

// Version 1: the base tables. Row ids are allocated by the writer ((run_id << 32) | seq), so the
// INTEGER PRIMARY KEYs other than runs.run_id are never chosen by SQLite.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta(key, value) VALUES ('format', 'dynamo-trace-store');
CREATE TABLE runs(
  run_id INTEGER PRIMARY KEY AUTOINCREMENT,
  pid INTEGER NOT NULL,
  hostname TEXT NOT NULL DEFAULT '',
  argv TEXT NOT NULL DEFAULT '[]',
  python_version TEXT NOT NULL DEFAULT '',
  torch_version TEXT NOT NULL DEFAULT '',
  dynamo_version TEXT NOT NULL DEFAULT '',
  start_time_us INTEGER NOT NULL,
  end_time_us INTEGER);
CREATE TABLE frames(
  frame_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  file TEXT NOT NULL,
  first_line INTEGER NOT NULL,
  name TEXT NOT NULL);
CREATE TABLE compiles(
  compile_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  frame_id INTEGER NOT NULL REFERENCES frames(frame_id),
  attempt INTEGER NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL,
  start_time_us INTEGER NOT NULL,
  duration_us INTEGER NOT NULL);
CREATE TABLE compile_phases(
  compile_id INTEGER NOT NULL REFERENCES compiles(compile_id),
  seq INTEGER NOT NULL,
  name TEXT NOT NULL,
  duration_us INTEGER NOT NULL,
  PRIMARY KEY (compile_id, seq)) WITHOUT ROWID;
CREATE TABLE graphs(
  graph_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  compile_id INTEGER NOT NULL REFERENCES compiles(compile_id),
  graph_index INTEGER NOT NULL,
  format TEXT NOT NULL,
  serialized BLOB NOT NULL,
  printed TEXT NOT NULL,
  num_nodes INTEGER NOT NULL,
  inputs TEXT NOT NULL,
  outputs TEXT NOT NULL);
CREATE TABLE graph_breaks(
  break_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  compile_id INTEGER NOT NULL REFERENCES compiles(compile_id),
  kind TEXT NOT NULL,
  user_file TEXT NOT NULL,
  user_line INTEGER NOT NULL,
  source_line TEXT NOT NULL,
  explanation TEXT NOT NULL,
  hints TEXT NOT NULL,
  user_stack TEXT NOT NULL);
CREATE TABLE guards(
  guard_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  compile_id INTEGER NOT NULL REFERENCES compiles(compile_id),
  kind TEXT NOT NULL,
  checks TEXT NOT NULL,
  source TEXT NOT NULL,
  user_file TEXT NOT NULL,
  user_line INTEGER NOT NULL,
  source_line TEXT NOT NULL);
CREATE TABLE guard_failures(
  failure_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  compile_id INTEGER NOT NULL REFERENCES compiles(compile_id),
  frame_id INTEGER REFERENCES frames(frame_id),
  guard_id INTEGER REFERENCES guards(guard_id),
  time_us INTEGER NOT NULL,
  reason TEXT NOT NULL);
CREATE TABLE code(
  code_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  compile_id INTEGER REFERENCES compiles(compile_id),
  kind TEXT NOT NULL,
  language TEXT NOT NULL,
  name TEXT NOT NULL,
  content BLOB NOT NULL);
CREATE TABLE artifacts(
  artifact_id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  compile_id INTEGER REFERENCES compiles(compile_id),
  name TEXT NOT NULL,
  media_type TEXT NOT NULL,
  data BLOB NOT NULL,
  time_us INTEGER NOT NULL);
)sql";

// Version 2: distributed runs (rank, world size) and the indexes the readers' queries need
// (frames of a run, compiles of a frame, breaks grouped by location, failures in time order).
constexpr const char* kSchemaV2 = R"sql(
ALTER TABLE runs ADD COLUMN rank INTEGER NOT NULL DEFAULT -1;
ALTER TABLE runs ADD COLUMN world_size INTEGER NOT NULL DEFAULT 0;
CREATE INDEX frames_by_run ON frames(run_id);
CREATE INDEX compiles_by_frame ON compiles(frame_id, attempt);
CREATE INDEX compiles_by_run ON compiles(run_id);
CREATE INDEX graphs_by_compile ON graphs(compile_id, graph_index);
CREATE INDEX graph_breaks_by_compile ON graph_breaks(compile_id);
CREATE INDEX graph_breaks_by_location ON graph_breaks(kind, user_file, user_line);
CREATE INDEX guards_by_compile ON guards(compile_id);
CREATE INDEX guard_failures_by_run ON guard_failures(run_id, time_us);
CREATE INDEX guard_failures_by_compile ON guard_failures(compile_id, time_us);
CREATE INDEX code_by_compile ON code(run_id, compile_id);
CREATE INDEX artifacts_by_run ON artifacts(run_id);
)sql";

// Version 3: what the compiler records in C++ (docs/trace-store.md). A graph break's specific
// reason on its own (detail); guard failures as data (the failing guard's kind and source, what
// differed, expected and seen, the user line that created the guard, and the compile the failure
// caused, so a recompile is joined to its failures by id); the runtime hits of each cache entry,
// counted by the entry itself (replacing the "dynamo.entry_hits" artifact of v1-v2, which readers
// still read in older stores). The by-run indexes of frames, compiles and guard failures go: a
// run's rows are a key range ((run << 32) | seq), and each index cost every compile's commit a
// page write.
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE graph_breaks ADD COLUMN detail TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN guard_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN guard_source TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN property TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN dim INTEGER NOT NULL DEFAULT -1;
ALTER TABLE guard_failures ADD COLUMN expected TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN seen TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN user_file TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN user_line INTEGER NOT NULL DEFAULT 0;
ALTER TABLE guard_failures ADD COLUMN source_line TEXT NOT NULL DEFAULT '';
ALTER TABLE guard_failures ADD COLUMN caused_compile_id INTEGER REFERENCES compiles(compile_id);
DROP INDEX frames_by_run;
DROP INDEX compiles_by_run;
DROP INDEX guard_failures_by_run;
CREATE TABLE cache_entry_hits(
  compile_id INTEGER PRIMARY KEY REFERENCES compiles(compile_id),
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  hits INTEGER NOT NULL,
  time_us INTEGER NOT NULL);
)sql";

constexpr Migration kMigrations[] = {
    {1, "base tables: meta, runs, frames, compiles, compile_phases, graphs, graph_breaks, "
        "guards, guard_failures, code, artifacts",
     kSchemaV1},
    {2, "runs.rank and runs.world_size for distributed jobs; indexes for the readers' queries",
     kSchemaV2},
    {3, "graph_breaks.detail; guard failures as data (guard kind and source, property, dim, "
        "expected, seen, the guard's user line, the compile caused); table cache_entry_hits; "
        "the by-run indexes of frames, compiles and guard failures dropped (key ranges)",
     kSchemaV3},
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion,
              "one migration per schema version, in order");

// The busy timeout of the read-only connections that classify a file (the probe, a reader). They
// wait only while another process creates the file, switches it to WAL or recovers its WAL.
constexpr int kOpenBusyTimeoutMs = 30000;

// StoreProbe::version when a read-only connection cannot tell (see probeExistingDatabase).
constexpr int kVersionUnknown = -1;

const char* kPathHint =
    "pass a path in a writable directory (DYNAMO_TRACE=/tmp/trace.db, or "
    "dynamo.trace.start_run(path))";
const char* kNewFileHint = "pass a new file name (e.g. trace.db); Dynamo never writes into a file "
                           "it did not create";

[[noreturn]] void fail(std::string summary, std::string explanation, std::string hint) {
  throw UserError(UserErrorKind::kTraceStore, std::move(summary), SourceLocation{},
                  std::move(explanation), std::move(hint));
}

std::string parentDirectory(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void checkDirectoryWritable(const std::string& path) {
  std::string dir = parentDirectory(path);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOTDIR)
      fail(detail::concat("cannot create trace store '", path, "': a parent of '", dir,
                          "' is not a directory"),
           "", kPathHint);
    fail(detail::concat("cannot create trace store '", path, "': directory '", dir,
                        "' does not exist"),
         "", kPathHint);
  }
  if (!S_ISDIR(st.st_mode))
    fail(detail::concat("cannot create trace store '", path, "': '", dir,
                        "' is not a directory"),
         "", kPathHint);
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    fail(detail::concat("cannot create trace store '", path, "': directory '", dir,
                        "' is not writable"),
         std::strerror(errno), kPathHint);
}

[[noreturn]] void failNotSqlite(const std::string& path) {
  fail(detail::concat("'", path, "' is not a Dynamo trace store (not an SQLite database)"),
       "the file does not start with the SQLite header; it was left untouched", kNewFileHint);
}

[[noreturn]] void failForeignDatabase(const std::string& path) {
  fail(detail::concat("'", path,
                      "' is not a Dynamo trace store (an SQLite database without Dynamo's "
                      "tables)"),
       "it has no meta table saying format = dynamo-trace-store; it was left untouched",
       kNewFileHint);
}

[[noreturn]] void failInterrupted(const std::string& path) {
  fail(detail::concat("trace store '", path,
                      "' holds an unfinished change of a writer that stopped"),
       detail::concat("'", path, "-journal' must be rolled back before the file can be read, "
                                 "and a reader never changes the file"),
       "open it once for writing to roll the change back (dynamo-trace upgrade FILE)");
}

[[noreturn]] void failNewer(const std::string& path, std::int64_t version) {
  fail(detail::concat("'", path, "' was written by trace-store schema version ", version,
                      "; this Dynamo reads up to version ", kSchemaVersion),
       "a newer Dynamo wrote it; this one will not read or change it",
       "upgrade Dynamo, or write to a new file");
}

// Checks version, tables and meta.format of an open connection; returns the version.
int classify(sql::Database& db, const std::string& path) {
  std::int64_t version = db.queryInt("PRAGMA user_version");
  std::int64_t tables = db.queryInt("SELECT count(*) FROM sqlite_master");
  if (version == 0 && tables == 0) return 0;  // an empty database: ours to initialize
  std::int64_t hasMeta =
      db.queryInt("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
  if (hasMeta == 0) failForeignDatabase(path);
  std::string format = db.queryText("SELECT value FROM meta WHERE key = 'format'");
  if (format != kTraceStoreFormat) failForeignDatabase(path);
  if (version > kSchemaVersion) failNewer(path, version);
  if (version < 1) failForeignDatabase(path);
  return static_cast<int>(version);
}

// classify() in one read transaction, so that its queries see one state of the file while other
// processes commit; started again while SQLite answers SQLITE_BUSY (busy timeout first).
int classifyInSnapshot(sql::Database& db, const std::string& path) {
  int version = 0;
  std::exception_ptr busy;
  int rc = db.retryWhileBusy([&] {
    try {
      db.exec("BEGIN", "starting a read transaction");
      version = classify(db, path);
      db.exec("COMMIT", "ending a read transaction");
      return SQLITE_OK;
    } catch (const sql::SqliteError& e) {
      sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
      if (e.resultCode() != SQLITE_BUSY) throw;
      busy = std::current_exception();
      return SQLITE_BUSY;
    } catch (...) {
      sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  });
  if (rc != SQLITE_OK) std::rethrow_exception(busy);
  return version;
}

// Opens `path` read-only (never changing it) and classifies it. A writer that stopped in the
// middle of a transaction in rollback-journal mode (a new store is created in that mode) leaves
// a hot journal, which only a read-write connection may roll back: for a writer the answer is
// then kVersionUnknown, and its own open rolls the journal back and classifies under the lock.
int probeExistingDatabase(const std::string& path, bool forWriting) {
  try {
    sql::Database db(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, kOpenBusyTimeoutMs);
    return classifyInSnapshot(db, path);
  } catch (const sql::SqliteError& e) {
    if (e.resultCode() == SQLITE_NOTADB || e.resultCode() == SQLITE_CORRUPT) failNotSqlite(path);
    if (e.extendedCode() == SQLITE_READONLY_ROLLBACK) {
      if (forWriting) return kVersionUnknown;
      failInterrupted(path);
    }
    throw;
  }
}

// PRAGMA journal_mode = WAL (a no-op for a file already in WAL mode). On a file still in
// rollback-journal mode it needs an exclusive lock, which other openers may hold for a moment;
// SQLite can answer SQLITE_BUSY here without calling the busy handler, so it is retried.
void switchToWal(sql::Database& db, const std::string& path) {
  sql::Statement pragma(db, "PRAGMA journal_mode = WAL");
  std::string mode;
  int rc = db.retryWhileBusy([&] {
    int stepped = pragma.tryStep();
    if (stepped != SQLITE_ROW && stepped != SQLITE_DONE) return stepped;
    if (stepped == SQLITE_ROW) mode = pragma.columnText(0);
    pragma.reset();
    return SQLITE_OK;
  });
  if (rc != SQLITE_OK) sql::throwSqlite(db.get(), rc, path, "switching to WAL mode");
  if (mode != "wal")
    fail(detail::concat("cannot put trace store '", path, "' in WAL mode (got '", mode, "')"),
         "the file system may not support the shared memory WAL needs (e.g. some network "
         "file systems)",
         "write the trace to a local disk");
}

void migrate(sql::Database& db, int from, int to) {
  for (const Migration& m : kMigrations) {
    if (m.toVersion <= from || m.toVersion > to) continue;
    db.exec(m.sql, detail::concat("migrating to schema version ", m.toVersion));
    db.exec(detail::concat("PRAGMA user_version = ", m.toVersion).c_str(),
            "setting the schema version");
  }
}

}  // namespace

StoreProbe probeTraceStore(const std::string& path, bool forWriting) {
  if (path.empty())
    fail("the trace store path is empty", "", "pass a file path such as /tmp/trace.db");
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (!forWriting) {
      fail(detail::concat("trace store '", path, "' does not exist"), std::strerror(err),
           "check the path: traces are written where DYNAMO_TRACE or dynamo.trace.start_run() "
           "pointed");
    }
    checkDirectoryWritable(path);
    return {};
  }
  if (S_ISDIR(st.st_mode))
    fail(detail::concat("'", path, "' is a directory, not a trace store"), "",
         detail::concat("pass a file path such as '", path, "/trace.db'"));
  if (!S_ISREG(st.st_mode))
    fail(detail::concat("'", path, "' is not a regular file"), "", kNewFileHint);
  if (st.st_size == 0) {
    if (!forWriting)
      fail(detail::concat("'", path, "' is empty, not a trace store"), "",
           "check the path; the writer may not have recorded anything yet");
    checkDirectoryWritable(path);
    return {true, 0};
  }
  char header[16] = {};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      fail(detail::concat("cannot read trace store '", path, "'"), std::strerror(errno),
           "check the file's permissions");
    in.read(header, sizeof header);
    if (in.gcount() != static_cast<std::streamsize>(sizeof header)) failNotSqlite(path);
  }
  if (std::memcmp(header, "SQLite format 3", 16) != 0) failNotSqlite(path);
  int version = probeExistingDatabase(path, forWriting);
  if (forWriting) {
    if (access(path.c_str(), W_OK) != 0)
      fail(detail::concat("cannot write trace store '", path, "': the file is read-only"),
           std::strerror(errno), kPathHint);
    checkDirectoryWritable(path);  // WAL needs to create '-wal' and '-shm' beside the file
  }
  return {true, version};
}

void beginImmediate(sql::Database& db) {
  // The busy timeout already waits inside sqlite3_exec; the retries cover the cases where SQLite
  // returns SQLITE_BUSY at once (e.g. a deadlock-avoiding writer in WAL mode).
  db.execRetryingBusy("BEGIN IMMEDIATE", "BEGIN IMMEDIATE");
}

sql::Database openStoreForWriting(const std::string& path, int targetVersion, int busyTimeoutMs,
                                  int& versionOut, int* versionFoundOut) {
  DYNAMO_INTERNAL_ASSERT(targetVersion >= 1 && targetVersion <= kSchemaVersion,
                         "bad target schema version ", targetVersion);
  probeTraceStore(path, /*forWriting=*/true);
  sql::Database db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                   busyTimeoutMs);
  // The schema first, in one transaction under the write lock: whoever opens the file meanwhile
  // sees no schema (0 bytes) or all of it, never an empty database. A new file is still in
  // rollback-journal mode here (the switch to WAL cannot happen inside a transaction).
  beginImmediate(db);
  int found = 0;
  try {
    // Classified again under the write lock: another process may have created, migrated or
    // (after a crash) rolled back the file since the probe.
    found = classify(db, path);
    if (found < targetVersion) migrate(db, found, targetVersion);
    db.execRetryingBusy("COMMIT", "committing the schema");
  } catch (...) {
    sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  switchToWal(db, path);
  db.exec("PRAGMA synchronous = NORMAL", "setting synchronous = NORMAL");
  versionOut = found < targetVersion ? targetVersion : found;
  if (versionFoundOut != nullptr) *versionFoundOut = found;
  return db;
}

sql::Database openStoreForReading(const std::string& path, int& versionOut) {
  StoreProbe probe = probeTraceStore(path, /*forWriting=*/false);
  if (probe.version == 0)
    fail(detail::concat("'", path, "' is an empty SQLite database, not a trace store yet"), "",
         "check the path; the writer may not have recorded anything yet");
  // A connection of its own for the queries; classified again, as a writer may have migrated the
  // file since the probe (a reader of an older version still reads a newer one's columns).
  sql::Database db(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, kOpenBusyTimeoutMs);
  try {
    versionOut = classifyInSnapshot(db, path);
  } catch (const sql::SqliteError& e) {
    if (e.extendedCode() == SQLITE_READONLY_ROLLBACK) failInterrupted(path);
    throw;
  }
  return db;
}

int upgradeTraceStore(const std::string& path) {
  StoreProbe probe = probeTraceStore(path, /*forWriting=*/true);
  if (!probe.exists)
    fail(detail::concat("trace store '", path, "' does not exist"), "",
         "check the path; nothing to upgrade");
  int version = 0;
  int found = 0;
  openStoreForWriting(path, kSchemaVersion, 30000, version, &found);
  return found;
}

std::string describeMigrations() {
  std::string out;
  for (const Migration& m : kMigrations)
    out += detail::concat(m.toVersion, ": ", m.summary, "\n");
  return out;
}

}  // namespace dynamo::storage
