// CompiledGraph: the one callable that a transformed code object calls.
//
//   transformed code:  PUSH_NULL; LOAD_CONST <CompiledGraph>; LOAD_FAST/DEREF/GLOBAL roots...; CALL n
//
// It fetches every graph input from the root values (x, self, G['w']) through Source steps
// (nn.Module attributes by the fast path), runs the compiled graph, rebuilds the Python values the
// rest of the code needs (the return value, or the stack and locals at a graph break) from graph
// outputs, fetched objects and constants, and replays side effects (setattr, list and dict
// contents) in program order.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "dynamo/core/graph_pyref.h"
#include "dynamo/core/backend.h"
#include "dynamo/core/source.h"

namespace dynamo::core::interp {

/// One fetched value: a root argument, or a step from an earlier fetched value.
struct FetchStep {
  int base = -1;   ///< index of the fetched base value; -1 for a root
  int arg = -1;    ///< roots: index into the call's arguments
  Source source;   ///< the step (fetchFrom), or the root
};

/// How to build one Python value after the graph ran.
struct OutPlan {
  enum class Kind { kGraphOutput, kConst, kFetched, kTuple, kList, kDict, kNamedTuple, kGetAttr, kSlice, kBoundMethod, kMemoRef };
  Kind kind = Kind::kConst;
  int index = -1;                  ///< kGraphOutput: output position; kFetched: fetch index
  PyObjectRef obj;                 ///< kConst: the object; kNamedTuple: the class; kBoundMethod: the function
  std::vector<OutPlan> children;   ///< containers; kGetAttr: [object]
  std::vector<PyObjectRef> keys;   ///< kDict keys
  std::string name;                ///< kGetAttr: attribute name
  int memo = -1;                   ///< kList/kDict built here: slot that remembers the object;
                                   ///< kMemoRef: index = the slot to reuse (same object again)
};

/// A side effect replayed after the graph.
struct EffectPlan {
  enum class Kind { kSetAttr, kListContents, kDictContents, kSetItem };
  Kind kind;
  OutPlan target;
  std::string name;          ///< kSetAttr: the attribute; kSetItem: the str key (a global's name)
  OutPlan value;
  size_t bodyBefore = 0;     ///< graph call nodes that precede it in program order
  bool final = true;         ///< applied after a successful run (contents: the last change)
  int nextSameTarget = -1;   ///< contents: index of the next change of the same container
  bool usesOutputs = false;  ///< its target or value is built from graph outputs
};

/// Everything a CompiledGraph needs; built by codegen.
struct GraphCallSpec {
  int nargs = 0;                         ///< number of root arguments
  std::vector<FetchStep> fetches;        ///< in dependency order
  std::vector<int> graphInputs;          ///< fetch index of each placeholder
  std::unique_ptr<CompiledGraphFn> fn;   ///< what the backend made of the graph
  bool hasGraph = true;                  ///< false: nothing to run (no tensor ops)
  std::vector<OutPlan> results;          ///< values returned
  bool returnSingle = false;             ///< return results[0] itself instead of a tuple
  std::vector<EffectPlan> effects;       ///< replayed in order
  int memoSlots = 0;                     ///< containers that appear more than once in the plans
  size_t numOutputs = 0;                 ///< the graph's output count (checked on backend results)
  std::string name;                      ///< "__compiled_fn_3 <f at model.py:10>" for errors
  int restoreGradMode = -1;              ///< 0/1: grad mode to restore when the graph raises
                                         ///< (it switches modes inside); -1: it never does
  bool leavesContextBlocks = false;      ///< it enters autocast or inference-mode blocks: leave
                                         ///< those still open when it raises
                                         ///< (dynamo.context_nodes.unwind)
};

/// An instance of a tuple subclass (namedtuple or structseq) holding `items` (a tuple). New ref.
PyObject* makeTupleSubclass(PyObject* cls, PyObject* items);

/// A new CompiledGraph object (new ref). Takes ownership of spec.
PyObject* makeCompiledGraph(std::unique_ptr<GraphCallSpec> spec);
/// The spec of a CompiledGraph, or null if `obj` is not one. Borrowed.
const GraphCallSpec* compiledGraphSpec(PyObject* obj);
/// Registers the CompiledGraph type on the extension module (dynamo._C.CompiledGraph).
int registerCompiledGraphType(PyObject* module);

}  // namespace dynamo::core::interp
