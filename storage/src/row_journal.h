// The writer's rows, and the row journal: rows appended to "<store>-rows-<run>" so that a
// compile's rows survive the process ending (SIGKILL, a crash) before the writer thread's batch
// commits them (see "Durability" in docs/trace-store.md). Private to dynamo::storage.
//
//   TraceWriter::record*() --encodeRow--> pending bytes --persist(): one write()--> journal file
//   writer thread commits the rows to SQLite --> the journal is truncated (nothing left to keep)
//   process dies --> the next opener (writer or reader) takes the journal's lock, inserts the
//                    rows the store lacks (decodeRows), removes the file
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dynamo/storage/records.h"

namespace dynamo::storage {

// The run's end, written by close().
struct RunEnd {
  std::int64_t endTimeUs = 0;
};

using Row = std::variant<FrameRecord, CompileRecord, GraphRecord, GraphBreakRecord, GuardRecord,
                         GuardFailureRecord, CodeRecord, ArtifactRecord, CacheEntryHitsRecord,
                         RunEnd>;

/// The journal file of run `runId` of the store at `storePath`: "<storePath>-rows-<runId>".
std::string rowJournalPath(const std::string& storePath, RowId runId);

/// What a journal file starts with: whose it is. Recovery inserts a journal's rows only into the
/// run that wrote it (same run id, pid and start time): a journal left beside a store that was
/// deleted and created anew is not taken for the new store's.
struct JournalHeader {
  RowId runId = 0;
  std::int64_t pid = 0;
  std::int64_t startTimeUs = 0;
};
inline constexpr std::size_t kJournalHeaderSize = 32;
/// The header's kJournalHeaderSize bytes.
std::string encodeJournalHeader(const JournalHeader& header);
/// The header at the start of `data`; nullopt when there is none (too short, another file).
std::optional<JournalHeader> decodeJournalHeader(std::string_view data);

/// Appends one record for `row` to `out`: a header (magic, length) and the row's fields.
void encodeRow(std::string& out, const Row& row);

/// The rows of a journal's content, in order. Stops at the first incomplete or damaged record (a
/// write cut short when the process died): what precedes it is returned.
std::vector<Row> decodeRows(std::string_view data);

}  // namespace dynamo::storage
