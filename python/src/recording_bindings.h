// The trace store's compile sink (recording_bindings.cpp) and what storage_bindings.cpp shares
// with it.
#pragma once

#include <Python.h>

#include <memory>

#include "dynamo/storage/trace_writer.h"

namespace dynamo::py {

/// The writer of a dynamo._C.TraceWriter object (borrowed ref). Throws UserError when it is
/// closed, TypeError (as a Python error) when `obj` is not a TraceWriter.
std::shared_ptr<storage::TraceWriter> writerOf(PyObject* obj);

/// Called by TraceWriter.close() (and dealloc) before the writer closes: the sink records the
/// cache entries' hits into it and detaches when it is the attached run. GIL held.
void beforeWriterClose(const storage::TraceWriter* writer);


}  // namespace dynamo::py
