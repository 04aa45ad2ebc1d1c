// Opening a trace store file for writing or reading: validation, WAL setup and migrations
// (private to dynamo::storage; the public side is trace_store.h).
#pragma once

#include <string>

#include "sqlite.h"

namespace dynamo::storage {

/// Opens `path` read-write (creating it when missing), in WAL mode, and migrates it to at least
/// `targetVersion` (never downgrades). Returns the connection; `versionOut` gets the version.
sql::Database openStoreForWriting(const std::string& path, int targetVersion, int busyTimeoutMs,
                                  int& versionOut);

/// Opens an existing store read-only; `versionOut` gets its schema version (1..kSchemaVersion).
sql::Database openStoreForReading(const std::string& path, int& versionOut);

/// BEGIN IMMEDIATE, retrying while another process holds the write lock (busy timeout first).
void beginImmediate(sql::Database& db);

}  // namespace dynamo::storage
