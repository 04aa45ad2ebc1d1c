// Per-code-object caches of the frame hook: guards, cache entries and the state kept in co_extra.
//
// Every code object the hook has compiled carries a CodeState in its co_extra slot. It holds the
// cache entries (most recently hit first), the skip/disable flags and counters for profilers.
// The CodeState is freed with its code object; reset() empties all of them.
//
// Threading: everything here is protected by the GIL. A guard that runs Python code may release
// the GIL, so lookups tolerate the entry list changing underneath them (see CodeState::lookup).
// Cache entries own Python references: destroy them only with the GIL held.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dynamo/core/frame_view.h"
#include "dynamo/core/graph_pyref.h"

namespace dynamo::core {

/// Decides whether a cache entry may run for a frame.
class GuardCheck {
 public:
  virtual ~GuardCheck() = default;
  /// Fast path, run on every call: true when the entry is valid for this frame. May throw
  /// (PythonError or any C++ exception); the error then propagates to the frame's caller.
  virtual bool check(const FrameView& frame) = 0;
  /// Slow path, run only after a miss: a sentence saying why check() failed, e.g.
  /// "tensor 'x' size mismatch at index 0. expected 4, actual 8".
  virtual std::string failureReason(const FrameView& frame) = 0;
};

/// One compiled version of a code object: its guard and the transformed code to run.
struct CacheEntry {
  /// Takes a new reference to `code` (a borrowed ref to a code object).
  CacheEntry(std::unique_ptr<GuardCheck> guard, PyObject* code,
             std::shared_ptr<void> compilerData = {});
  /// Releases the code object: needs the GIL.
  ~CacheEntry();
  CacheEntry(const CacheEntry&) = delete;
  CacheEntry& operator=(const CacheEntry&) = delete;

  std::unique_ptr<GuardCheck> guard;  ///< the entry's guard; never null
  PyObject* code;                     ///< the transformed code object (owned, new ref)
  uint64_t id;                        ///< process-unique id, in creation order
  uint64_t hits = 0;                  ///< calls that ran this entry after its guard passed
  std::shared_ptr<void> compilerData; ///< opaque slot for the compiler (graph, backend, ...)
  uint64_t owner = 0;                 ///< FrameCompiler::ownerId() of its maker; 0: any may use it
};

/// Counters for profilers, per code object. Reset by reset().
struct CodeStats {
  uint64_t hits = 0;            ///< calls that ran a cached entry
  uint64_t misses = 0;          ///< calls where no entry's guard passed (empty cache included)
  uint64_t compiles = 0;        ///< entries the compiler added
  uint64_t declined = 0;        ///< compiler asked to run the original this time
  uint64_t compileErrors = 0;   ///< compiler raised
  uint64_t guardErrors = 0;     ///< a guard raised
};

/// What the hook keeps for one code object (stored in its co_extra).
class CodeState {
 public:
  /// The state of `code`, or nullptr if it has none. `code` is a borrowed ref; GIL held.
  static CodeState* find(PyObject* code);
  /// The state of `code`, created on first use. Throws PythonError on failure.
  static CodeState& getOrCreate(PyObject* code);
  /// Number of code objects that currently carry a state.
  static size_t liveCount();

  /// The code object this state belongs to. Borrowed ref.
  PyObject* code() const { return code_; }
  /// The cache entries, most recently hit first.
  const std::vector<std::shared_ptr<CacheEntry>>& entries() const { return entries_; }
  /// Never try to compile this code again, for any compiler (cleared by reset()), or for one
  /// compiler: the mark a compiler leaves when it declines a frame is its own, so another
  /// backend or a fullgraph compile still gets to compile (and to raise) on its own terms.
  bool skipped() const { return skipped_ || !skippedBy_.empty(); }
  /// True when compiler `owner` must not try this code (a mark for all, or its own).
  bool skippedFor(uint64_t owner) const {
    if (skipped_) return true;
    for (uint64_t o : skippedBy_)
      if (o == owner) return true;
    return false;
  }
  /// Sets or clears the mark for every compiler (clearing also drops the per-compiler marks).
  void setSkipped(bool skipped) {
    skipped_ = skipped;
    if (!skipped) skippedBy_.clear();
  }
  /// Marks the code as declined by compiler `owner` only.
  void skipFor(uint64_t owner) {
    if (!skippedFor(owner)) skippedBy_.push_back(owner);
  }
  /// Never capture this code at all, across reset(): our own generated code and compiler frames.
  bool disabled() const { return disabled_; }
  /// Sets or clears the disabled mark.
  void setDisabled(bool disabled) { disabled_ = disabled; }
  /// Counters for profilers.
  const CodeStats& stats() const { return stats_; }
  /// Counters, for the hook to update.
  CodeStats& mutableStats() { return stats_; }
  /// Why each entry's guard failed on the last miss that led to a compile (slow path results).
  const std::vector<std::string>& lastMissReasons() const { return lastMissReasons_; }

  /// Runs the guards in order; the first entry that passes is moved to the front, counted and
  /// returned. nullptr on a miss. Throws what a guard throws. With `owner` set, only entries made
  /// by that compiler (or by none) qualify: a different backend or fullgraph setting never runs
  /// another compiler's code.
  std::shared_ptr<CacheEntry> lookup(const FrameView& frame, uint64_t owner = 0);
  /// Calls every entry's failureReason() (never throws; errors become the text) and records the
  /// result in lastMissReasons().
  const std::vector<std::string>& explainMiss(const FrameView& frame);
  /// Adds an entry at the front.
  void addEntry(std::shared_ptr<CacheEntry> entry);
  /// Drops all entries, the skip flag, miss reasons and counters (not the disabled flag).
  void clear();

  /// Empties every CodeState in the process (see clear()). GIL held.
  static void resetAll();

  /// Use getOrCreate(); public for std::make_unique. `code` is borrowed (the state lives in it).
  explicit CodeState(PyObject* code) : code_(code) {}
  /// Called through the co_extra free function when the code object dies (GIL held).
  ~CodeState();

 private:
  bool promote(const std::shared_ptr<CacheEntry>& entry, size_t indexHint, uint64_t versionSeen);

  PyObject* code_;  // borrowed ref: the state lives in this code object's co_extra
  std::vector<std::shared_ptr<CacheEntry>> entries_;
  bool skipped_ = false;
  std::vector<uint64_t> skippedBy_;  // compilers (owner ids) that declined this code
  bool disabled_ = false;
  CodeStats stats_;
  std::vector<std::string> lastMissReasons_;
  uint64_t version_ = 0;  // bumped whenever entries_ changes
};

}  // namespace dynamo::core
