// Guards: the checks a compiled entry needs to pass before it may run.
//
// Each guard is a leaf with a fast check(value) (no allocation, no string building) and a slow
// describeFailure(value) that explains a failure. A GuardSet groups the leaves by Source into a
// tree, so each source is fetched once per check, runs global-state guards first and cheap checks
// before expensive ones, and can list every failing guard with its reason and the user line that
// created it (the recompile profiler, DYNAMO_LOGS=recompiles) or every guard (DYNAMO_LOGS=guards).
//
//   GuardSetBuilder.add(source, leaf, where)  --dedup-->  GuardSet
//   GuardSet.check(frame)     hot path: bool
//   GuardSet.failures(frame)  slow path: [GuardFailure]
//   GuardSet.describe()       all guards, one per line
//
// All calls must hold the GIL (guards hold references to Python objects).
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dynamo/common/error.h"
#include "dynamo/core/source.h"
#include "dynamo/core/symbolic.h"

namespace dynamo::core {

/// The guard kinds, from guard_kinds.def.
enum class GuardKind {
#define DYNAMO_GUARD_KIND(Id, NAME, COST, DESCRIPTION) k##Id,
#include "dynamo/core/guard_kinds.def"
};

/// One row of guard_kinds.def.
struct GuardKindInfo {
  GuardKind kind;           ///< the enumerator
  const char* name;         ///< "TENSOR_MATCH"
  int cost;                 ///< relative cost; 0 = needs no source
  const char* description;  ///< one line
};

/// Every guard kind, in .def order.
const std::vector<GuardKindInfo>& guardKinds();
/// The row for `kind`.
const GuardKindInfo& guardKindInfo(GuardKind kind);

/// Why a leaf guard failed, as data (rendered as `text`): the trace store, the recompile
/// profiler and DYNAMO_LOGS=recompiles read the fields, never the text.
struct GuardMismatch {
  std::string text;      ///< "tensor 'x' size mismatch at dim 0: expected 4, got 8"
  std::string property;  ///< what differed: "size", "stride", "dtype", "value", "object", ...
  int dim = -1;          ///< the dimension of a size/stride mismatch, else -1
  std::string expected;  ///< what the entry was compiled for ("4")
  std::string seen;      ///< what this call passed ("8")
};

/// One leaf check on one value. Made by the make* functions below; immutable after creation.
class LeafGuard {
 public:
  virtual ~LeafGuard() = default;
  LeafGuard(const LeafGuard&) = delete;
  LeafGuard& operator=(const LeafGuard&) = delete;

  GuardKind kind() const { return kind_; }
  /// Global-state guards read no source; check() gets value == NULL.
  bool needsSource() const { return guardKindInfo(kind_).cost > 0; }

  /// Hot path. value: borrowed (NULL for global-state guards). No allocation, no text; never
  /// leaves a Python error set (a raising comparison counts as a failure).
  virtual bool check(PyObject* value) const = 0;
  /// Slow path, after check() failed: why, naming the source as `sourceName`, e.g.
  /// "tensor 'x' size mismatch at dim 0: expected 4, got 8". Never leaves a Python error set.
  virtual std::string describeFailure(PyObject* value, const std::string& sourceName) const = 0;
  /// Slow path, as data: describeFailure() with what differed, expected and seen. The default
  /// has the text only (for kinds whose failure has no single expected value).
  virtual GuardMismatch mismatch(PyObject* value, const std::string& sourceName) const {
    GuardMismatch m;
    m.text = describeFailure(value, sourceName);
    return m;
  }
  /// What is checked, e.g. "tensor x: float32 cpu sizes=[4, 8] strides=[8, 1] requires_grad=False".
  virtual std::string describe(const std::string& sourceName) const = 0;
  /// Same kind and same expectation (for dedup)?
  virtual bool sameAs(const LeafGuard& other) const = 0;

 protected:
  explicit LeafGuard(GuardKind kind) : kind_(kind) {}

 private:
  GuardKind kind_;
};

using LeafGuardPtr = std::unique_ptr<LeafGuard>;

// --- Guard factories. Arguments are borrowed refs; the guard keeps what it needs. -------------
// Each throws UserError(kInvalidArgument) when the argument does not fit the kind.

/// TYPE_MATCH: type(value) is type(example), exactly.
LeafGuardPtr makeTypeMatch(PyObject* example);
/// ID_MATCH: value is `expected`. Keeps a weak reference where the type allows one (the guard
/// then fails once `expected` dies, instead of keeping a model alive), else a strong one.
LeafGuardPtr makeIdMatch(PyObject* expected);
/// EQUALS_MATCH: value == constant with the same exact type, element-wise for tuples. constant:
/// int, float, str, bool, None, or a tuple of those.
LeafGuardPtr makeEqualsMatch(PyObject* constant);
/// LENGTH_CHECK: len(value) == length (list, tuple, dict; any sized object on the slow path).
LeafGuardPtr makeLengthCheck(Py_ssize_t length);
/// DICT_KEYS: value is a dict with exactly example's keys, in the same order.
LeafGuardPtr makeDictKeys(PyObject* exampleDict);
/// IS_NONE: value is None.
LeafGuardPtr makeIsNone();
/// NOT_NONE: value is not None.
LeafGuardPtr makeNotNone();
/// HASATTR: hasattr(value, name) == present.
LeafGuardPtr makeHasAttr(const std::string& name, bool present);
/// MODULE_CALL: an nn.Module's instance dict has empty _forward_hooks, _forward_pre_hooks and
/// _backward_hooks and no `forward` (one guard per inlined module instead of four).
LeafGuardPtr makeModuleCall();
/// NO_INSTANCE_ATTR: `name` is not in the object's own __dict__ (a method is not shadowed).
LeafGuardPtr makeNoInstanceAttr(const std::string& name);
/// TENSOR_MATCH: the tensor matches `exampleTensor` in exact Python type (Tensor, Parameter or a
/// subclass), dispatch key set (TLS include/exclude applied), dtype, device, requires_grad, ndim,
/// sizes and strides. (tensor_guards.cpp, the one TU with torch headers.)
/// With `dynamicDims` (one flag per dimension), a flagged dimension's size is not checked (the
/// ShapeGuards of the entry check its range and relations) and the tensor must be contiguous
/// (strides are then implied by the sizes); the example must be contiguous too.
LeafGuardPtr makeTensorMatch(PyObject* exampleTensor, const std::vector<bool>& dynamicDims = {});
/// GRAD_MODE: torch grad mode is `enabled`.
LeafGuardPtr makeGradMode(bool enabled);
/// GRAD_MODE with the current grad mode as the expectation.
LeafGuardPtr makeGradModeFromCurrent();
/// DEFAULT_DTYPE: torch.get_default_dtype() is what it is now.
LeafGuardPtr makeDefaultDtypeFromCurrent();
/// INFERENCE_MODE: torch.is_inference_mode_enabled() is as it is now.
LeafGuardPtr makeInferenceModeFromCurrent();
/// AUTOCAST: autocast on the CPU and on CUDA is enabled or not, with the same dtype, as it is now.
LeafGuardPtr makeAutocastFromCurrent();
/// The autocast state now: "off", or the devices it is on for with their dtypes,
/// "cpu(torch.bfloat16)", "cpu(torch.bfloat16)+cuda(torch.float16)" (read through torch's Python API).
std::string currentAutocastState();

// --- Records ----------------------------------------------------------------------------------

/// A guard as data: for the trace store, the explainer, DYNAMO_LOGS=guards and the GUI.
struct GuardInfo {
  GuardKind kind;           ///< the kind
  std::string kindName;     ///< "TENSOR_MATCH"
  std::string sourceName;   ///< "self.fc1.weight"; "" for global-state guards
  std::string checked;      ///< what is checked: "tensor x: float32 cpu sizes=[4, 8] ..."
  SourceLocation where;     ///< the user line that created the guard (pain point 9)
};

/// One failing guard, found by GuardSet::failures().
struct GuardFailure {
  GuardKind kind;           ///< the kind of the failing guard
  std::string sourceName;   ///< its source; "" for global-state guards
  std::string reason;       ///< "tensor 'x' size mismatch at dim 0: expected 4, got 8"
  SourceLocation where;     ///< the user line that created the guard
  std::string property;     ///< what differed (GuardMismatch::property), "" when unknown
  int dim = -1;             ///< GuardMismatch::dim
  std::string expected;     ///< GuardMismatch::expected
  std::string seen;         ///< GuardMismatch::seen
  /// reason, then "\n  (guard created at model.py:12: y = x.view(4, -1))" when the line is known.
  std::string str() const;
};

// --- GuardSet ---------------------------------------------------------------------------------

namespace detail {
struct GuardNode;
}

/// The guards of one compiled entry, grouped by source. Immutable once built.
class GuardSet {
 public:
  GuardSet();
  GuardSet(GuardSet&&) noexcept;
  GuardSet& operator=(GuardSet&&) noexcept;
  ~GuardSet();

  /// Hot path: do all guards pass? Fetches each source once, stops at the first failure, never
  /// leaves a Python error set.
  bool check(const FrameValues& frame) const;
  /// Slow path: every failing guard with its reason (empty when check() passes). A source that
  /// cannot be read counts as one failure of its first guard and skips the guards under it.
  std::vector<GuardFailure> failures(const FrameValues& frame) const;
  /// The failures joined one per line ("" when all pass): GuardCheck::failureReason.
  std::string failureReason(const FrameValues& frame) const;
  /// Every guard, in check order.
  std::vector<GuardInfo> guards() const;
  /// Every guard, one per line: "TENSOR_MATCH  tensor x: ...  # model.py:12: y = x.view(4, -1)".
  std::string describe() const;
  /// Number of guards.
  std::size_t size() const { return count_; }

 private:
  friend class GuardSetBuilder;
  std::vector<std::pair<LeafGuardPtr, SourceLocation>> globals_;  // global-state guards
  std::vector<std::unique_ptr<detail::GuardNode>> roots_;         // one per root source
  std::size_t count_ = 0;
};

/// Collects guards while tracing; dedups identical guards on the same source.
class GuardSetBuilder {
 public:
  GuardSetBuilder();
  ~GuardSetBuilder();
  GuardSetBuilder(const GuardSetBuilder&) = delete;
  GuardSetBuilder& operator=(const GuardSetBuilder&) = delete;

  /// Adds `guard` on `source` (a null Source for global-state guards), created by the user line
  /// `where`. Returns false (and drops the guard) when an identical guard is already there.
  bool add(const Source& source, LeafGuardPtr guard, SourceLocation where = {});
  /// Number of guards kept so far.
  std::size_t size() const;
  /// Drops the guards added after the first `n` (those of an instruction that was not captured).
  void truncate(std::size_t n);
  /// The GuardSet, ordered for checking: global-state guards, then per source the cheap guards
  /// first, sources with cheap guards before those with expensive ones. Empties the builder.
  GuardSet build();

 private:
  struct Pending;
  std::vector<Pending> pending_;
};

/// The symbolic-shape guards of one entry (dynamic shapes), checked in one pass over the input
/// sizes after the GuardSet: every dynamic dimension's size is read once (a symbol's defining
/// source), its other sources (duck sizing) must equal it, each symbol must lie in its range
/// (sizes 0 and 1 stay specialised) and every relation of the ShapeEnv must hold.
/// (tensor_guards.cpp reads the sizes.)
class ShapeGuards {
 public:
  struct DimSource {
    Source tensor;  ///< the input tensor (or, with dim -1, the Python int input)
    int dim = 0;    ///< the dimension read; -1: the source is an int whose value is the symbol
  };
  /// `sources[id]`: where symbol id is read, defining source first.
  ShapeGuards(sym::ShapeEnv env, std::vector<std::vector<DimSource>> sources);
  bool check(const FrameValues& frame) const;
  /// "" when they pass, else the first failing check with the user line that created it.
  std::string failureReason(const FrameValues& frame) const;
  /// The first failing check as data (kind SHAPE_ENV, property "shape"; the source and dim of
  /// the symbol it concerns, the expected range or relation, the value seen), or nullopt.
  std::optional<GuardFailure> failure(const FrameValues& frame) const;
  /// Every shape guard, one per line (ShapeEnv::describe).
  std::string describe() const { return env_.describe(); }
  bool empty() const { return sources_.empty() && env_.guards().empty(); }
  /// One input read by the hot path, and where its sizes go (internal: the reader in
  /// tensor_guards.cpp uses it).
  struct InputRead {
    Source source;  ///< the tensor (or int) input
    int slot = -1;  ///< its frame slot when it is a plain local (read without a fetch), else -1
    struct Dim {
      int dim;     ///< the dimension (-1: the input is an int, its value is the symbol)
      int target;  ///< where the size goes: its symbol's slot for a defining source, else a
                   ///< slot after the symbols' that is compared with the symbol's (duck sizing)
    };
    std::vector<Dim> dims;
  };

 private:
  /// Reads every symbol's value (false when a source cannot be read or sources disagree; then
  /// `why` says which). The slow path's reader.
  bool read(const FrameValues& frame, std::vector<int64_t>& values, GuardFailure* why) const;
  /// The hot path's reader: one fetch per input, every dimension read from it in one go.
  bool readFast(const FrameValues& frame, int64_t* values) const;

  sym::ShapeEnv env_;
  std::vector<std::vector<DimSource>> sources_;
  std::vector<InputRead> reads_;  // sources_ grouped by input, in order of first use
  std::vector<std::pair<int, int>> duck_;  // (slot, symbol): the other sources of duck-sized symbols
  sym::FlatShapeCheck flat_;      // env_'s guards, compiled
};

}  // namespace dynamo::core
