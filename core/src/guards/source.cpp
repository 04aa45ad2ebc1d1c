// Source nodes: naming and fetching values of a frame (see source.h).
#include "dynamo/core/source.h"

#include <cstdio>
#include <functional>

#include "dynamo/common/error.h"
#include "module_attr.h"
#include "py_text.h"

namespace dynamo::core {

/// The node behind a Source handle. Immutable; owns its Python references.
class SourceNode {
 public:
  SourceKind kind = SourceKind::kLocal;
  Source base;                      ///< null for roots
  std::string display;              ///< the name as the user wrote it
  std::string rawName;              ///< local / global / builtin / attribute name
  int slot = -1;                    ///< kLocal: index into FrameValues::locals
  PyObject* nameObj = nullptr;      ///< interned str of rawName (new ref; globals, attrs)
  PyObject* key = nullptr;          ///< kItem: the constant key (new ref)
  std::string keyRepr;              ///< kItem: repr(key), for equality and display
  bool keyIsIndex = false;          ///< kItem: key is an exact int that fits Py_ssize_t
  Py_ssize_t index = 0;             ///< kItem: the index when keyIsIndex
  ModuleSlot moduleSlot = ModuleSlot::kNone;  ///< kModuleAttr: where it was found at trace time
  int depth = 0;                    ///< steps from the root
  std::size_t hash = 0;             ///< hash of (kind, base, rawName, slot, keyRepr)

  SourceNode() = default;
  SourceNode(const SourceNode&) = delete;
  SourceNode& operator=(const SourceNode&) = delete;
  ~SourceNode() {
    Py_XDECREF(nameObj);
    Py_XDECREF(key);
  }
};

namespace {

std::size_t combine(std::size_t seed, std::size_t v) {
  return seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

void finish(SourceNode& n) {
  std::size_t h = std::hash<int>()(static_cast<int>(n.kind));
  if (n.base) h = combine(h, n.base.hash());
  h = combine(h, std::hash<std::string>()(n.rawName));
  h = combine(h, std::hash<int>()(n.slot));
  h = combine(h, std::hash<std::string>()(n.keyRepr));
  n.hash = h;
  n.depth = n.base ? n.base.depth() + 1 : 0;
}

PyObject* internName(const std::string& name) {
  PyObject* s = PyUnicode_InternFromString(name.c_str());  // new ref
  if (s == nullptr) throw UserError(UserErrorKind::kInvalidArgument,
                                    "source name is not valid UTF-8: " + name);
  return s;
}

// d[name] for a dict d; new ref, or NULL with `missing` raised when absent.
PyObject* dictFetch(PyObject* d, PyObject* name, PyObject* missing, const char* what) {
  if (d == nullptr || !PyDict_Check(d)) {
    PyErr_Format(PyExc_TypeError, "frame %s is not a dict", what);
    return nullptr;
  }
  PyObject* v = PyDict_GetItemWithError(d, name);  // borrowed ref
  if (v == nullptr) {
    if (!PyErr_Occurred()) PyErr_Format(missing, "name '%U' is not defined", name);
    return nullptr;
  }
  Py_INCREF(v);  // new ref for the caller
  return v;
}

const SourceNode& nodeOf(const Source& s) {
  DYNAMO_INTERNAL_ASSERT(s.node() != nullptr, "use of a null Source");
  return *s.node();
}

}  // namespace

Source Source::local(int slot, std::string name) {
  DYNAMO_USER_CHECK(slot >= 0, UserErrorKind::kInvalidArgument, "local slot must be >= 0, got ",
                    slot);
  auto n = std::make_shared<SourceNode>();
  n->kind = SourceKind::kLocal;
  n->slot = slot;
  n->display = name;
  n->rawName = std::move(name);
  finish(*n);
  return Source(std::move(n));
}

Source Source::global(const std::string& name) {
  auto n = std::make_shared<SourceNode>();
  n->kind = SourceKind::kGlobal;
  n->rawName = name;
  n->display = "G['" + name + "']";
  n->nameObj = internName(name);
  finish(*n);
  return Source(std::move(n));
}

Source Source::builtin(const std::string& name) {
  auto n = std::make_shared<SourceNode>();
  n->kind = SourceKind::kBuiltin;
  n->rawName = name;
  n->display = "builtins['" + name + "']";
  n->nameObj = internName(name);
  finish(*n);
  return Source(std::move(n));
}

Source Source::object(PyObject* obj, std::string display) {
  auto n = std::make_shared<SourceNode>();
  n->kind = SourceKind::kObject;
  n->display = std::move(display);
  Py_INCREF(obj);
  n->key = obj;  // new ref
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<void*>(obj));
  n->keyRepr = buf;  // identity: equal sources hold the same object
  finish(*n);
  return Source(std::move(n));
}

PyObject* Source::heldObject() const {
  const SourceNode& n = nodeOf(*this);
  return n.kind == SourceKind::kObject ? n.key : nullptr;
}

Source Source::attr(const Source& base, const std::string& name) {
  auto n = std::make_shared<SourceNode>();
  n->kind = SourceKind::kAttr;
  n->base = base;
  n->rawName = name;
  n->display = nodeOf(base).display + "." + name;
  n->nameObj = internName(name);
  finish(*n);
  return Source(std::move(n));
}

Source Source::moduleAttr(const Source& base, const std::string& name, ModuleSlot foundIn) {
  Source s = attr(base, name);
  auto n = std::const_pointer_cast<SourceNode>(s.node_);  // not shared yet: safe to finish here
  n->kind = SourceKind::kModuleAttr;
  n->moduleSlot = foundIn;
  finish(*n);
  return s;
}

Source Source::item(const Source& base, PyObject* key) {
  std::string keyRepr;
  {
    PyObject* r = PyObject_Repr(key);  // new ref
    if (r == nullptr) {
      std::string err = guards_detail::takeErrorText();
      throw UserError(UserErrorKind::kInvalidArgument, "item source key has no repr: " + err);
    }
    const char* text = PyUnicode_AsUTF8(r);  // borrowed buffer, owned by r
    keyRepr = text != nullptr ? text : "<undecodable>";
    PyErr_Clear();
    Py_DECREF(r);
  }
  auto n = std::make_shared<SourceNode>();
  n->kind = SourceKind::kItem;
  n->base = base;
  Py_INCREF(key);
  n->key = key;  // new ref, owned by the node
  n->keyRepr = guards_detail::typeName(key) + ":" + keyRepr;
  n->display = nodeOf(base).display + "[" + keyRepr + "]";
  if (PyLong_CheckExact(key)) {
    Py_ssize_t i = PyLong_AsSsize_t(key);
    if (i == -1 && PyErr_Occurred()) {
      PyErr_Clear();
    } else {
      n->keyIsIndex = true;
      n->index = i;
    }
  }
  finish(*n);
  return Source(std::move(n));
}

Source Source::fromNumpy(const Source& base) {
  auto n = std::make_shared<SourceNode>();
  n->kind = SourceKind::kFromNumpy;
  n->base = base;
  n->display = "torch.from_numpy(" + nodeOf(base).display + ")";
  finish(*n);
  return Source(std::move(n));
}

SourceKind Source::kind() const { return nodeOf(*this).kind; }
const std::string& Source::name() const { return nodeOf(*this).display; }
const Source& Source::base() const { return nodeOf(*this).base; }
bool Source::isRoot() const { return !nodeOf(*this).base; }
int Source::depth() const { return nodeOf(*this).depth; }
std::size_t Source::hash() const { return node_ ? node_->hash : 0; }
ModuleSlot Source::moduleSlot() const { return nodeOf(*this).moduleSlot; }
int Source::localSlot() const { return nodeOf(*this).kind == SourceKind::kLocal ? nodeOf(*this).slot : -1; }

bool operator==(const Source& a, const Source& b) {
  if (a.node_ == b.node_) return true;
  if (!a.node_ || !b.node_) return false;
  const SourceNode& x = *a.node_;
  const SourceNode& y = *b.node_;
  return x.hash == y.hash && x.kind == y.kind && x.slot == y.slot && x.rawName == y.rawName &&
         x.keyRepr == y.keyRepr && x.base == y.base;
}

PyObject* Source::fetchRoot(const FrameValues& frame) const {
  const SourceNode& n = nodeOf(*this);
  switch (n.kind) {
    case SourceKind::kLocal: {
      PyObject* v = nullptr;  // borrowed ref
      if (n.slot < frame.nlocals) {
        v = frame.localAt != nullptr ? frame.localAt(frame.context, n.slot) : frame.locals[n.slot];
      }
      if (v == nullptr) {
        PyErr_Format(PyExc_UnboundLocalError, "local variable '%s' (slot %d) is not bound",
                     n.rawName.c_str(), n.slot);
        return nullptr;
      }
      Py_INCREF(v);  // new ref for the caller
      return v;
    }
    case SourceKind::kGlobal:
      return dictFetch(frame.globals, n.nameObj, PyExc_NameError, "globals");
    case SourceKind::kBuiltin:
      return dictFetch(frame.builtins, n.nameObj, PyExc_NameError, "builtins");
    case SourceKind::kObject:
      Py_INCREF(n.key);
      return n.key;  // new ref
    default:
      DYNAMO_INTERNAL_ASSERT(false, "fetchRoot on a non-root source ", n.display);
  }
  return nullptr;
}

PyObject* Source::fetchFrom(PyObject* base) const {
  const SourceNode& n = nodeOf(*this);
  switch (n.kind) {
    case SourceKind::kAttr:
      return PyObject_GetAttr(base, n.nameObj);  // new ref
    case SourceKind::kModuleAttr:
      return guards_detail::fetchModuleAttr(base, n.nameObj, n.moduleSlot);  // new ref
    case SourceKind::kItem: {
      PyObject* v = nullptr;  // borrowed ref
      if (n.keyIsIndex && PyList_CheckExact(base)) {
        Py_ssize_t i = n.index < 0 ? n.index + PyList_GET_SIZE(base) : n.index;
        if (i >= 0 && i < PyList_GET_SIZE(base)) v = PyList_GET_ITEM(base, i);
      } else if (n.keyIsIndex && PyTuple_CheckExact(base)) {
        Py_ssize_t i = n.index < 0 ? n.index + PyTuple_GET_SIZE(base) : n.index;
        if (i >= 0 && i < PyTuple_GET_SIZE(base)) v = PyTuple_GET_ITEM(base, i);
      } else if (PyDict_CheckExact(base)) {
        v = PyDict_GetItemWithError(base, n.key);
        if (v == nullptr) {
          if (!PyErr_Occurred()) {
            PyObject* args = PyTuple_Pack(1, n.key);  // new ref (a tuple key must not unpack)
            if (args != nullptr) PyErr_SetObject(PyExc_KeyError, args);
            Py_XDECREF(args);
          }
          return nullptr;
        }
      } else {
        return PyObject_GetItem(base, n.key);  // new ref
      }
      if (v == nullptr) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return nullptr;
      }
      Py_INCREF(v);  // new ref for the caller
      return v;
    }
    case SourceKind::kFromNumpy: {
      static PyObject* fromNumpy = [] {
        PyObject* torch = PyImport_ImportModule("torch");  // new ref
        PyObject* f = torch ? PyObject_GetAttrString(torch, "from_numpy") : nullptr;  // new ref, kept
        Py_XDECREF(torch);
        return f;
      }();
      if (fromNumpy == nullptr) return nullptr;
      return PyObject_CallOneArg(fromNumpy, base);  // new ref
    }
    default:
      DYNAMO_INTERNAL_ASSERT(false, "fetchFrom on a root source ", n.display);
  }
  return nullptr;
}

PyObject* Source::fetch(const FrameValues& frame) const {
  const SourceNode& n = nodeOf(*this);
  if (!n.base) return fetchRoot(frame);
  PyObject* b = n.base.fetch(frame);  // new ref
  if (b == nullptr) return nullptr;
  PyObject* v = fetchFrom(b);  // new ref
  Py_DECREF(b);
  return v;
}

}  // namespace dynamo::core
