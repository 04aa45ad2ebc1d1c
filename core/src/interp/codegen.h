// Output code generation: from a finished trace to the transformed code object.
//
//   return path:  prologue; PUSH_NULL; LOAD_CONST <CompiledGraph>; <roots>; CALL
//                 [UNPACK + STORE_DEREF/STORE_GLOBAL for cell and global writes]; RETURN_VALUE
//
//   break path:   prologue; <call CompiledGraph> -> (stack values, locals, cell/global writes)
//                 UNPACK; STORE them; PUSH_NULL; MAKE_FUNCTION <resume code>; push the stack;
//                 <the breaking instruction>; load locals; CALL; RETURN_VALUE
//                 (a data-dependent jump gets one resume call per branch)
//
// A resume function continues the original bytecode after the break: its arguments are the
// stack values and the live locals (cells passed as cell objects), its prologue rebuilds the
// stack and jumps to the instruction after the break; the whole original body is kept.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph_call.h"
#include "tracer.h"

namespace dynamo::core::interp {

/// What a resume code object needs when it is itself traced: which argument slots hold cell
/// objects (passed from the parent) rather than values.
struct ResumeInfo {
  std::vector<int> preCelledSlots;
  std::string originalName;  ///< the user function it continues
  PyObjectRef rootCode;      ///< the code object of that function (not a resume code)
  std::string firstArgName;  ///< the original's first argument (self for methods); "" if none
  SourceLocation breakAt;    ///< the user line whose break made it: its ___stack arguments are
                             ///< values computed there (guards on them are blamed on that line)
};
/// The info of a resume code object made by this process, or null.
const ResumeInfo* resumeInfo(PyCodeObject* code);

/// The result of planning: the graph's outputs are fixed and the call spec is half built.
struct OutputPlan {
  std::unique_ptr<GraphCallSpec> spec;   ///< without the backend's function yet
  std::vector<Source> roots;             ///< the root arguments of the CompiledGraph call
  /// Bytecode stores after the call, in tuple order after the values the code needs.
  struct Store {
    enum class Kind { kFast, kDeref, kGlobal } kind;
    int slot = -1;
    std::string name;
  };
  std::vector<Store> stores;             ///< break path: stack temps and locals come first
  /// Break path: functions made in the frame, rebuilt by MAKE_FUNCTION over the frame's cells.
  struct FunctionLocal {
    int slot = -1;                       ///< where to store it
    PyObjectRef code;                    ///< its code object
    std::vector<int> cellSlots;          ///< frame slots of its closure cells, in order
    std::vector<PyObjectRef> defaults;   ///< constant defaults
  };
  std::vector<FunctionLocal> functions;
  int stackTemps = 0;                    ///< break path: number of non-null stack values
  std::vector<bool> liveLocals;          ///< break path: per frame slot, read after the break
};

/// Plans the outputs and sets the graph's output node (return path when brk is null).
/// Throws GraphBreak(kUnsupported) when a value cannot be rebuilt after the graph.
OutputPlan planOutputs(CompileContext& ctx, Tracer& root, const ValueRef& returned,
                       const RootBreak* brk);

/// Emits the transformed code object for the root frame (new ref). compiledGraph: borrowed.
PyObjectRef emitCode(CompileContext& ctx, Tracer& root, PyCodeObject* code, const OutputPlan& plan,
                     PyObject* compiledGraph, const RootBreak* brk);

/// Root-argument helpers shared with the compiler.
struct RootInfo {
  enum class Kind { kLocal, kGlobal, kObject } kind;
  int slot = -1;
  std::string name;
  PyObject* object = nullptr;  ///< kObject: the held object (borrowed from the Source)
};
/// Describes a root Source (kLocal: by its name in the code's slots; kGlobal/kBuiltin: by name).
RootInfo rootInfoOf(PyCodeObject* code, const Source& root, const std::vector<std::string>& slotNames);

}  // namespace dynamo::core::interp
