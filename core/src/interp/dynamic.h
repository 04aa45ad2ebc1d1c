// Dynamic shapes in the tracer: which input dimensions are symbolic (the policy), the symbols
// of a compile's input sizes, the symbolic sizes of recorded calls' results, and specialisation
// where a size must be concrete.
//
//   policy (per code object, across its compiles)     one compile (CompileContext)
//   ---------------------------------------------     ----------------------------------------
//   sizes seen at earlier compiles, per input     ->  plan(): static / dynamic per dimension
//   dims that changed (automatic dynamic)              makeInputSymbols(): ShapeEnv symbols,
//   mark_dynamic / mark_static on the tensor             TENSOR_MATCH with the dynamic mask
//   dims specialised by a trace: stay static     <-   inferResultSizes(): result sizes of a call
//                                                      specializeSizes(): a size read as a value
//
// Result sizes are found by running the call's meta kernel again with other values for the
// symbols (probes at both ends of the range and in between) and fitting an integer linear form;
// a shape function that is not linear in the symbols, or any probe failure, specialises the
// symbols of the call's arguments (guarded: a different size recompiles). Correctness first: a
// dimension is dynamic only while nothing the trace decided depends on its value.
#pragma once

#include <Python.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tracer.h"

namespace dynamo::core::interp {

/// The sizes of a tensor (its example's `shape`).
std::vector<int64_t> sizesOf(PyObject* t);

/// dynamo.compile(dynamic=None|False|True).
enum class DynamicMode { kAutomatic, kOff, kAll };

/// The dynamic-shape policy of one code object, kept across its compiles.
class DynamicState {
 public:
  DynamicState(DynamicMode mode, bool automatic) : mode_(mode), automatic_(automatic) {}

  struct DimPlan {
    bool dynamic = false;
    sym::Range range{2, sym::kInf};
    bool duck = true;
    std::string why;  ///< for the compile record: "size changed (8 -> 16)", "mark_dynamic", ...
  };
  /// Decides each dimension of the tensor input reached through `source` and records its sizes.
  std::vector<DimPlan> plan(const std::string& source, PyObject* tensor);
  /// A dimension specialised during a trace stays static in later compiles of this code
  /// (dim -1: the Python int input `source`).
  void keepStatic(const std::string& source, int dim, const std::string& why);
  /// Decides whether the Python int input reached through `source`, now `value`, is a symbol in
  /// this compile (it changed since an earlier compile; with dynamic=True too) and records the value.
  /// `why` says why it is, or why a changed int is not (0 and 1 are specialised, ...).
  bool planInt(const std::string& source, int64_t value, std::string& why);
  /// The same for a Python float input (a learning rate): symbolic once it changed (compared
  /// bit for bit); no value is specialised by policy (floats are never sizes).
  bool planFloat(const std::string& source, double value, std::string& why);

 private:
  DynamicMode mode_;
  bool automatic_;
  std::map<std::string, std::vector<int64_t>> seen_;           // sizes at the last compile
  std::map<std::string, std::set<int>> changed_;               // dims seen with two sizes
  std::map<std::pair<std::string, int>, std::string> static_;  // kept static, why
  std::map<std::string, int64_t> seenInts_;                    // int inputs at the last compile
  std::map<std::string, std::string> lastChange_;              // int/float inputs: " (a -> b)"
  std::set<std::string> changedInts_;                          // int inputs seen with two values
  std::map<std::string, double> seenFloats_;                   // float inputs at the last compile
  std::set<std::string> changedFloats_;                        // float inputs seen with two values
};

/// The DynamicState of each code object a compiler compiles. Every compile of a function makes
/// its own resume functions; those continuing the same function after the same break share one
/// state, so a value that changed across earlier resume functions is dynamic in the next one
/// (instead of each new one starting static).
class DynamicRegistry {
 public:
  std::shared_ptr<DynamicState> forCode(PyCodeObject* code, DynamicMode mode, bool automatic);

 private:
  std::map<PyObject*, std::pair<PyObjectRef, std::shared_ptr<DynamicState>>> states_;
  /// Resume functions, by (the function they continue, "qualname@break line").
  std::map<std::pair<PyObject*, std::string>, std::pair<PyObjectRef, std::shared_ptr<DynamicState>>> resumeStates_;
};

/// For a tensor input just wrapped as `v`: makes symbols for its dynamic dimensions (filling
/// TensorData::symSizes) and returns the TENSOR_MATCH mask (empty when all static).
std::vector<bool> makeInputSymbols(CompileContext& ctx, const ValueRef& v, PyObject* tensor, const Source& source);

/// After `fn(*args, **kwargs)` (or the method) was recorded with result `result` (whose examples
/// are computed for the hints): gives its tensors symbolic sizes, or specialises the arguments'
/// symbols when that cannot be done exactly. A Python value result (a metadata query) that
/// depends on a symbol specialises it.
void inferResultSizes(CompileContext& ctx, PyObject* fn, const std::string& method, const std::vector<ValueRef>& args,
                      const std::vector<std::pair<std::string, ValueRef>>& kwargs, const ValueRef& result);

/// The sizes of `tensor` are read as Python values (x.shape, len(x), iteration): its dynamic
/// dimensions are specialised with a guard and stay static in later compiles.
void specializeSizes(CompileContext& ctx, const ValueRef& tensor, const std::string& why);

/// After an in-place op on `tensor` (whose example it changed in place): an op that changed its
/// sizes (unsqueeze_, resize_) specialises the tensor's symbols (its size expressions no longer
/// describe it).
void checkInPlaceSizes(CompileContext& ctx, const ValueRef& tensor, const std::string& what);

/// Symbols `ids` must be concrete: each is pinned to its example value (guarded, with `why` and
/// the current line) and its sources stay static in later compiles of the code.
void specializeSymbols(CompileContext& ctx, const std::vector<int>& ids, const std::string& why);

/// The ShapeGuards of a finished trace, or null when it has no symbols.
std::unique_ptr<ShapeGuards> makeShapeGuards(const CompileContext& ctx);

/// `graph` (the trace's graph) with each node's tensor meta given the symbolic sizes its Value
/// ends the trace with (TensorMeta::symShape; symbols pinned since are replaced by their values);
/// `graph` itself when the trace has no dynamic dimension left.
Graph withSymShapes(const CompileContext& ctx, const Graph& graph);

}  // namespace dynamo::core::interp
