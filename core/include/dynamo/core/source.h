// Sources: how to reach a value from a Python frame.
//
// The symbolic interpreter wraps every value it reads from the frame with a Source ("x",
// "self.layer1[0].conv1.weight", "G['torch']", "cfg['lr']") and installs guards on it. A Source is
// an immutable, ref-counted node: a root (a frame slot, a global, a builtin) or a step from a base
// Source (an attribute, an item, an nn.Module attribute through the fast path). Nodes are made
// only through the static make functions and compared by value, so guards on equal sources can be
// grouped and deduplicated.
//
// Threading and lifetime: every call here must hold the GIL, destruction included (nodes own
// references to interned attribute names and item keys).
#pragma once

#include <Python.h>

#include <cstddef>
#include <memory>
#include <string>

namespace dynamo::core {

/// The values of one frame, as the guards read them. Every pointer is borrowed from the frame.
///
/// Slot values come from `locals` or, when `localAt` is set, from localAt(context, slot): that
/// lets a FrameView (whose free variables live in closure cells) be adapted without copying:
///   FrameValues v;  v.nlocals = view.numLocals();  v.context = &view;
///   v.localAt = [](const void* c, int i) { return static_cast<const FrameView*>(c)->local(i); };
///   v.globals = view.globals();  v.builtins = view.builtins();
struct FrameValues {
  PyObject* const* locals = nullptr;  ///< slot values (locals, args, cells, free vars resolved); NULL = unbound
  int nlocals = 0;                    ///< number of slots
  PyObject* globals = nullptr;        ///< the frame's globals dict
  PyObject* builtins = nullptr;       ///< the frame's builtins dict
  /// Optional slot reader used instead of `locals`: borrowed ref, NULL = unbound (no error set).
  PyObject* (*localAt)(const void* context, int slot) = nullptr;
  const void* context = nullptr;      ///< passed to localAt
};

/// What kind of step a Source node is.
enum class SourceKind {
  kLocal,       ///< a frame slot: local, argument, cell or free variable
  kGlobal,      ///< a name in the frame's globals dict
  kBuiltin,     ///< a name in the frame's builtins dict
  kAttr,        ///< getattr(base, name)
  kModuleAttr,  ///< attribute of an nn.Module read through the fast path (see planModuleAttr)
  kItem,        ///< base[key] for a constant key (int index, str key, ...)
  kObject,      ///< a fixed object held by the source (another module's globals dict)
  kFromNumpy,   ///< torch.from_numpy(base): the tensor sharing a numpy array's memory
};

/// Where planModuleAttr found an nn.Module attribute at trace time.
enum class ModuleSlot {
  kNone,          ///< not found, or not fast-path safe
  kInstanceDict,  ///< the instance __dict__ (plain attributes: ints, flags, ...)
  kParameters,    ///< module._parameters
  kBuffers,       ///< module._buffers
  kModules,       ///< module._modules (submodules)
};

/// "parameter", "buffer", "submodule", "attribute" or "none".
const char* moduleSlotName(ModuleSlot slot);

class SourceNode;

/// A handle to an immutable Source node. Cheap to copy; compare with == (by value).
class Source {
 public:
  Source() = default;

  /// Frame slot `slot` (index into FrameValues::locals), shown as `name`.
  static Source local(int slot, std::string name);
  /// A global variable, shown as G['name'].
  static Source global(const std::string& name);
  /// A builtin, shown as builtins['name'].
  static Source builtin(const std::string& name);
  /// A fixed object, e.g. the globals dict of a module whose functions are inlined; shown as
  /// `display`. obj: borrowed ref (a new ref is kept).
  static Source object(PyObject* obj, std::string display);
  /// getattr(base, name), shown as base.name.
  static Source attr(const Source& base, const std::string& name);
  /// An nn.Module attribute read through the fast path, shown as base.name. Valid only where
  /// planModuleAttr(module, name).safe held at trace time (and the module's type is guarded).
  static Source moduleAttr(const Source& base, const std::string& name, ModuleSlot foundIn);
  /// base[key] for a constant key; shown as base[repr(key)]. key: borrowed ref (a new ref is kept).
  /// Throws UserError when repr(key) fails.
  static Source item(const Source& base, PyObject* key);

  /// torch.from_numpy(base): a tensor sharing the memory of the numpy array at base, made anew
  /// on each fetch; shown as torch.from_numpy(base).
  static Source fromNumpy(const Source& base);

  /// kObject roots: the object (borrowed); NULL otherwise.
  PyObject* heldObject() const;
  /// Null handle?
  explicit operator bool() const { return node_ != nullptr; }
  SourceKind kind() const;
  /// The source as the user wrote it: "x", "self.layer1[0].conv1.weight", "G['torch']".
  const std::string& name() const;
  /// The base source of a step; a null handle for roots (local, global, builtin).
  const Source& base() const;
  /// Root sources read the frame directly (or hold their object); steps read their base's value.
  bool isRoot() const;
  /// Number of steps from the root (roots: 0).
  int depth() const;
  /// Hash consistent with ==.
  std::size_t hash() const;
  /// Where the nn.Module attribute was found (kModuleAttr only; else kNone).
  ModuleSlot moduleSlot() const;
  /// kLocal: the frame slot it reads; -1 for every other kind.
  int localSlot() const;

  /// The value, read from the frame: a new ref, or NULL with a Python error set (NameError,
  /// AttributeError, KeyError, IndexError, UnboundLocalError ...).
  PyObject* fetch(const FrameValues& frame) const;
  /// Roots only: the value read from the frame, or the held object (new ref, or NULL with a
  /// Python error).
  PyObject* fetchRoot(const FrameValues& frame) const;
  /// Steps only: the value reached from the base's value `base` (borrowed). New ref, or NULL with
  /// a Python error.
  PyObject* fetchFrom(PyObject* base) const;

  const SourceNode* node() const { return node_.get(); }

  friend bool operator==(const Source& a, const Source& b);
  friend bool operator!=(const Source& a, const Source& b) { return !(a == b); }

 private:
  explicit Source(std::shared_ptr<const SourceNode> node) : node_(std::move(node)) {}
  std::shared_ptr<const SourceNode> node_;
};

/// Hash functor, for unordered containers keyed by Source.
struct SourceHash {
  std::size_t operator()(const Source& s) const { return s.hash(); }
};

/// The interpreter's decision for `module.name` on an nn.Module instance.
struct ModuleAttrPlan {
  bool safe = false;                     ///< the fast fetch gives what getattr would give
  ModuleSlot foundIn = ModuleSlot::kNone;  ///< where the attribute lives now
  std::string whyNot;                    ///< when !safe: why not, for logs ("class defines a property 'weight'")
};

/// Decides whether `module.name` can be read by the fast nn.Module path (instance __dict__, then
/// _parameters, _buffers, _modules) instead of getattr: module must be a torch.nn.Module whose
/// class keeps Module.__getattr__ and object.__getattribute__, no class in its MRO may define
/// `name` (a property or any class attribute would win over __getattr__), and the attribute must
/// exist in one of those dicts now. module: borrowed. Never raises; imports torch.nn on first use.
ModuleAttrPlan planModuleAttr(PyObject* module, const std::string& name);

}  // namespace dynamo::core
