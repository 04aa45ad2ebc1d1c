// CodeState and CacheEntry: the per-code-object caches stored in co_extra.
//
// Storage: one co_extra index for the process (requested on first use) with a free function, so
// a CodeState dies with its code object. A registry of live states lets reset() empty them all
// without keeping any code object alive.
#include <Python.h>

#include <algorithm>
#include <exception>
#include <unordered_set>
#include <utility>

#include "dynamo/core/frame_cache.h"

#if PY_VERSION_HEX >= 0x030D0000
#error "dynamo's frame hook supports CPython 3.11 and 3.12 only"
#endif

namespace dynamo::core {

namespace {

uint64_t gNextEntryId = 1;  // GIL-protected

// Every CodeState alive in the process; states remove themselves in their destructor.
std::unordered_set<CodeState*>& registry() {
  static auto* states = new std::unordered_set<CodeState*>();  // leaked: outlives finalization
  return *states;
}

// co_extra free function: called by CPython when the code object dies (GIL held).
void freeCodeState(void* state) { delete static_cast<CodeState*>(state); }

Py_ssize_t codeExtraIndex() {
  static Py_ssize_t index = -1;
  if (index < 0) {
#if PY_VERSION_HEX >= 0x030C0000
    index = PyUnstable_Eval_RequestCodeExtraIndex(freeCodeState);
#else
    index = _PyEval_RequestCodeExtraIndex(freeCodeState);
#endif
  }
  return index;
}

int getExtra(PyObject* code, Py_ssize_t index, void** out) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_GetExtra(code, index, out);
#else
  return _PyCode_GetExtra(code, index, out);
#endif
}

int setExtra(PyObject* code, Py_ssize_t index, void* value) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_SetExtra(code, index, value);
#else
  return _PyCode_SetExtra(code, index, value);
#endif
}

}  // namespace

CacheEntry::CacheEntry(std::unique_ptr<GuardCheck> guardIn, PyObject* codeIn,
                       std::shared_ptr<void> data)
    : guard(std::move(guardIn)), code(codeIn), id(gNextEntryId++), compilerData(std::move(data)) {
  Py_INCREF(code);  // new ref, released in the destructor
}

CacheEntry::~CacheEntry() { Py_DECREF(code); }

CodeState* CodeState::find(PyObject* code) {
  Py_ssize_t index = codeExtraIndex();
  if (index < 0) {
    PyErr_Clear();
    return nullptr;
  }
  void* extra = nullptr;
  if (getExtra(code, index, &extra) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return static_cast<CodeState*>(extra);
}

CodeState& CodeState::getOrCreate(PyObject* code) {
  if (CodeState* existing = find(code)) return *existing;
  Py_ssize_t index = codeExtraIndex();
  if (index < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "no free co_extra index");
    throw PythonError{};
  }
  auto state = std::make_unique<CodeState>(code);
  if (setExtra(code, index, state.get()) < 0) throw PythonError{};
  registry().insert(state.get());
  return *state.release();  // owned by the code object now
}

size_t CodeState::liveCount() { return registry().size(); }

CodeState::~CodeState() { registry().erase(this); }

bool CodeState::promote(const std::shared_ptr<CacheEntry>& entry, size_t indexHint,
                        uint64_t versionSeen) {
  size_t index = indexHint;
  if (version_ != versionSeen) {
    // The list changed while the guard ran (another thread, or the guard itself): find it again.
    auto it = std::find(entries_.begin(), entries_.end(), entry);
    if (it == entries_.end()) return false;  // dropped by reset(): stale, treat as a miss
    index = static_cast<size_t>(it - entries_.begin());
  }
  if (index != 0) {
    std::rotate(entries_.begin(), entries_.begin() + index, entries_.begin() + index + 1);
    ++version_;
  }
  return true;
}

std::shared_ptr<CacheEntry> CodeState::lookup(const FrameView& frame, uint64_t owner) {
  // A Python guard may release the GIL, and another thread may then add, reorder or drop
  // entries. After each guard, if the list changed, restart the scan (bounded).
  constexpr int kMaxRestarts = 3;
  for (int attempt = 0; attempt <= kMaxRestarts; ++attempt) {
    bool restarted = false;
    for (size_t i = 0; i < entries_.size(); ++i) {
      uint64_t versionSeen = version_;
      std::shared_ptr<CacheEntry> entry = entries_[i];  // keeps it alive across the guard
      if (owner != 0 && entry->owner != 0 && entry->owner != owner) continue;
      bool passed = false;
      try {
        passed = entry->guard->check(frame);
      } catch (...) {
        ++stats_.guardErrors;
        throw;
      }
      if (passed && promote(entry, i, versionSeen)) {
        ++entry->hits;
        ++stats_.hits;
        return entry;
      }
      if (version_ != versionSeen) {
        restarted = true;
        break;
      }
    }
    if (!restarted) break;
  }
  ++stats_.misses;
  return nullptr;
}

const std::vector<std::string>& CodeState::explainMiss(const FrameView& frame) {
  std::vector<std::shared_ptr<CacheEntry>> snapshot = entries_;  // guards may run Python
  std::vector<std::string> reasons;
  reasons.reserve(snapshot.size());
  for (const auto& entry : snapshot) {
    try {
      reasons.push_back(entry->guard->failureReason(frame));
    } catch (const std::exception& e) {
      PyErr_Clear();
      reasons.push_back(std::string("<failureReason raised: ") + e.what() + ">");
    } catch (...) {
      PyErr_Clear();
      reasons.push_back("<failureReason raised>");
    }
  }
  lastMissReasons_ = std::move(reasons);
  return lastMissReasons_;
}

void CodeState::addEntry(std::shared_ptr<CacheEntry> entry) {
  entries_.insert(entries_.begin(), std::move(entry));
  ++version_;
}

void CodeState::clear() {
  // Move everything out first: dropping entries can run arbitrary Python (finalizers).
  std::vector<std::shared_ptr<CacheEntry>> dropped = std::move(entries_);
  entries_.clear();
  ++version_;
  skipped_ = false;
  skippedBy_.clear();
  stats_ = CodeStats{};
  lastMissReasons_.clear();
}

void CodeState::resetAll() {
  std::vector<CodeState*> states(registry().begin(), registry().end());
  // Collect the entries before releasing any: a finalizer may free a code object (and its
  // CodeState) while we iterate.
  std::vector<std::shared_ptr<CacheEntry>> dropped;
  for (CodeState* state : states) {
    for (auto& entry : state->entries_) dropped.push_back(std::move(entry));
    state->clear();
  }
  dropped.clear();
}

}  // namespace dynamo::core
