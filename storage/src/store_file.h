// Opening a trace store file for writing or reading: validation, WAL setup and migrations
// (private to dynamo::storage; the public side is trace_store.h).
#pragma once

#include <string>

#include "sqlite.h"

namespace dynamo::storage {

/// Opens `path` read-write (creating it when missing), creates or migrates its schema to at least
/// `targetVersion` in one transaction (never downgrades), then puts it in WAL mode. Returns the
/// connection; `versionOut` gets the version now, `versionFoundOut` (optional) the version found
/// under the write lock before migrating (0 for a new store).
sql::Database openStoreForWriting(const std::string& path, int targetVersion, int busyTimeoutMs,
                                  int& versionOut, int* versionFoundOut = nullptr);

/// Opens an existing store read-only; `versionOut` gets its schema version (1..kSchemaVersion).
sql::Database openStoreForReading(const std::string& path, int& versionOut);

/// Inserts the rows of the row journals (row_journal.h) that writers which died left beside the
/// store at `path` (a journal nobody holds the lock of), those the store lacks, and removes the
/// journals. Journals of live writers, and any that cannot be recovered now, are left alone.
void recoverRowJournals(sql::Database& db, const std::string& path, int version);
/// Whether row journals lie beside the store at `path` (a directory listing; no lock).
bool hasRowJournals(const std::string& path);

/// BEGIN IMMEDIATE, retrying while another process holds the write lock (busy timeout first, then
/// retries until the connection's busy timeout has passed).
void beginImmediate(sql::Database& db);

}  // namespace dynamo::storage
