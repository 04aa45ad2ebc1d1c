// The kKernelArtifact metadata of a KernelRecord (records.h): JSON text, written by the writer
// and read back by the reader. Private to storage.
#pragma once

#include <string>

#include "dynamo/storage/records.h"

namespace dynamo::storage::detail {

/// The metadata of `k` (all but its source), naming its code row `codeId`.
std::string kernelMetaJson(const KernelRecord& k, RowId codeId);
/// Fills `k`'s metadata from `json`; returns the code row it names, 0 when the text is not
/// kernel metadata (k untouched then).
RowId readKernelMeta(const std::string& json, KernelRecord& k);
/// A kKernelRunArtifact's JSON {code_id, run_us, calls}; false when unreadable.
bool readKernelRun(const std::string& json, RowId& codeId, std::int64_t& runUs, int& calls);

}  // namespace dynamo::storage::detail
