// The graph runner: the "eager" backend's executor. It calls each node's target in order with
// the vectorcall protocol, keeps intermediate values in a slot array and frees each one right
// after its last use, so peak memory matches eager execution.
//
// Construction does all planning (slots, last uses, constant objects, kwnames tuples); run() is a
// tight loop. Errors raised by a node keep their type and message; a PEP 678 note names the node and
// the user's file:line and source line.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "dynamo/core/graph.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core {

/// Executes one Graph. Immutable after construction; run() may be called from any thread that
/// holds the GIL, and re-entrantly (each call has its own slots).
class GraphRunner {
 public:
  /// Plans the execution of graph. Needs the GIL; throws PythonError if a constant cannot be
  /// made (e.g. an unknown dtype name).
  explicit GraphRunner(Graph graph);
  ~GraphRunner();
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  /// Runs the graph on `count` inputs (borrowed refs; count must equal inputCount()). Returns a
  /// new reference to the output structure, or NULL with a Python error set; then, when
  /// `failedAt` is given and a node raised, *failedAt is that node's index in the body.
  PyObject* run(PyObject* const* inputs, size_t count, size_t* failedAt = nullptr) const;

  /// Like run(), but takes ownership of the `count` inputs (new refs, stolen whatever happens) and
  /// frees each one right after its last use, as eager autograd frees a saved tensor once the
  /// node that needed it has run. The AOT backward uses it (python/dynamo/aot/runtime.py): its
  /// saved values are handed over and die as soon as the backward graph no longer needs them.
  PyObject* runOwned(PyObject* const* inputs, size_t count, size_t* failedAt = nullptr) const;

  /// Number of graph inputs.
  size_t inputCount() const;
  /// The graph this runner executes.
  const Graph& graph() const { return graph_; }
  /// For tests and the README: after which step each slot is freed (slot -> step index; the
  /// output step is body().size()). Input slots are never freed by run() (the caller owns them): -1.
  std::vector<int> lastUses() const;
  /// For tests: after which step runOwned() frees each input (-1: before the first step, unused).
  std::vector<int> inputLastUses() const;

 private:
  struct Plan;
  PyObject* execute(PyObject* const* inputs, size_t count, bool owned, size_t* failedAt) const;
  Graph graph_;
  std::unique_ptr<Plan> plan_;
};

}  // namespace dynamo::core
