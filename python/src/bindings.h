// Entry points of the binding files that make up dynamo._C. module.cpp calls each once at import;
// each adds its functions and types to the module and returns -1 with a Python error set on
// failure. One file per component, named <component>_bindings.cpp. The test-only bindings
// (bytecode, frame hook, guards) are in python/testing/, the _dynamo_testing module.
#pragma once

#include <Python.h>

namespace dynamo::py {

/// storage_bindings.cpp: the trace store (dynamo._C.TraceStore and helpers).
int initStorageBindings(PyObject* module);
/// graph_bindings.cpp: the graph IR, its printer, serializer and runner.
int initGraphBindings(PyObject* module);
/// compiler_bindings.cpp: the frame compiler behind dynamo.optimize.
int initCompilerBindings(PyObject* module);
/// report_bindings.cpp: the explain and profile reports over a trace store.
int initReportBindings(PyObject* module);
/// aot_bindings.cpp: the AOT layer's partitioner and decomposition tables (dynamo._C._aot).
int initAotBindings(PyObject* module);
/// codegen_bindings.cpp: the fused code generator (dynamo._C._codegen).
int initCodegenBindings(PyObject* module);

}  // namespace dynamo::py
