// The trace store file: schema versions, validation and upgrade.
//
// A trace store is an SQLite database in WAL mode whose `meta` table says
// format = "dynamo-trace-store" and whose `PRAGMA user_version` is its schema version. The
// writer (trace_writer.h) creates and upgrades files; the reader (trace_reader.h) only reads.
// Every refusal is a UserError of kind kTraceStore naming the file and the fix, and leaves the
// file byte-for-byte as it was.
#pragma once

#include <string>

namespace dynamo::storage {

/// The schema version this build writes, and the newest it reads.
constexpr int kSchemaVersion = 3;

/// The value of meta.format that marks a file as a trace store.
constexpr const char* kTraceStoreFormat = "dynamo-trace-store";

/// What an existing file at a path is, found without changing it.
struct StoreProbe {
  bool exists = false;  ///< the path names an existing file (size > 0)
  int version = 0;      ///< its schema version; 0 for a new or empty file; -1 (forWriting only)
                        ///< when a writer stopped mid-change: the next writer's open decides
};

/// Checks that `path` can hold a trace store without changing anything on disk: its directory is
/// writable (forWriting), it is an SQLite database with the trace-store tables, and its schema
/// is not newer than kSchemaVersion. Throws UserError(kTraceStore) naming the file and the fix.
StoreProbe probeTraceStore(const std::string& path, bool forWriting);

/// Upgrades the file at `path` to kSchemaVersion in place, keeping every row. Returns the
/// version it had. Refuses (and leaves alone) anything probeTraceStore refuses.
int upgradeTraceStore(const std::string& path);

/// One line per schema version: "1: base tables ...". For docs and `dynamo-trace schema`.
std::string describeMigrations();

}  // namespace dynamo::storage
