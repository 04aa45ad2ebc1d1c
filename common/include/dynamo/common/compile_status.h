// CompileStatus: how a compile attempt ended (compile_statuses.def), shared by the compiler
// (core), the trace store (storage) and the reports.
#pragma once

#include <optional>
#include <string_view>

namespace dynamo {

/// How a compile attempt ended (compile_statuses.def).
enum class CompileStatus {
#define DYNAMO_COMPILE_STATUS(id, stored, listener, madeEntry, description) id,
#include "dynamo/common/compile_statuses.def"
#undef DYNAMO_COMPILE_STATUS
};

/// The trace store's name of a status ("graph_break").
constexpr std::string_view compileStatusName(CompileStatus s) {
  switch (s) {
#define DYNAMO_COMPILE_STATUS(id, stored, listener, madeEntry, description) \
  case CompileStatus::id:                                                    \
    return stored;
#include "dynamo/common/compile_statuses.def"
#undef DYNAMO_COMPILE_STATUS
  }
  return "unknown";
}

/// The listener dicts' name of a status ("compiled").
constexpr std::string_view compileStatusListenerName(CompileStatus s) {
  switch (s) {
#define DYNAMO_COMPILE_STATUS(id, stored, listener, madeEntry, description) \
  case CompileStatus::id:                                                    \
    return listener;
#include "dynamo/common/compile_statuses.def"
#undef DYNAMO_COMPILE_STATUS
  }
  return "unknown";
}

/// Whether a compile with this status made a cache entry.
constexpr bool compileStatusMadeEntry(CompileStatus s) {
  switch (s) {
#define DYNAMO_COMPILE_STATUS(id, stored, listener, madeEntry, description) \
  case CompileStatus::id:                                                    \
    return madeEntry;
#include "dynamo/common/compile_statuses.def"
#undef DYNAMO_COMPILE_STATUS
  }
  return false;
}

/// Whether a stored status name made a cache entry ("ok", "graph_break"); false when unknown.
inline bool compileStatusNameMadeEntry(std::string_view stored) {
#define DYNAMO_COMPILE_STATUS(id, storedName, listener, madeEntry, description) \
  if (stored == storedName) return madeEntry;
#include "dynamo/common/compile_statuses.def"
#undef DYNAMO_COMPILE_STATUS
  return false;
}

}  // namespace dynamo
