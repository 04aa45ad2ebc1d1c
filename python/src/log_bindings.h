// DYNAMO_LOGS in C++: the compile logs printed from the compile record the trace store's sink
// receives (log_bindings.cpp), and dynamo._C._logs, through which python/dynamo/logs.py sets
// the levels it parsed from DYNAMO_LOGS / set_logs().
#pragma once

#include <Python.h>

#include "dynamo/core/compiler.h"

namespace dynamo::py {

/// Prints the DYNAMO_LOGS lines of one compile attempt on sys.stderr: graph_breaks, recompiles,
/// guards, passes, graph, bytecode, in that order. Nothing when every log is off. GIL held;
/// never throws (a failing write is dropped).
void logCompile(const core::CompileRecord& record);

/// Whether any of the compile logs that need the record's listings (guards, passes, graph,
/// bytecode) is on. GIL held.
bool logsWantListings();


}  // namespace dynamo::py
