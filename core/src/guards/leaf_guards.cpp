// The leaf guards that need no torch headers: TYPE_MATCH, ID_MATCH, EQUALS_MATCH, LENGTH_CHECK,
// DICT_KEYS, IS_NONE, NOT_NONE, HASATTR. (TENSOR_MATCH, GRAD_MODE and DEFAULT_DTYPE live in
// tensor_guards.cpp, the one file that includes torch.)
//
// Each class keeps what check() needs as plain pointers and numbers; text is built only in
// describeFailure() and describe().
#include <cmath>
#include <vector>

#include "dynamo/core/guards.h"
#include "py_text.h"

namespace dynamo::core {

using guards_detail::ErrorSaver;
using guards_detail::objectLabel;
using guards_detail::safeRepr;
using guards_detail::typeName;

namespace {

std::string quoted(const std::string& sourceName) { return "'" + sourceName + "'"; }

// "<subject> changed: expected X, got Y" (or another verb), and its fields.
GuardMismatch differs(std::string subject, const char* property, std::string expected,
                      std::string seen) {
  GuardMismatch m;
  m.text = subject + ": expected " + expected + ", got " + seen;
  m.property = property;
  m.expected = std::move(expected);
  m.seen = std::move(seen);
  return m;
}

// ---- TYPE_MATCH -------------------------------------------------------------------------------

class TypeMatchGuard final : public LeafGuard {
 public:
  explicit TypeMatchGuard(PyTypeObject* type) : LeafGuard(GuardKind::kTypeMatch), type_(type) {
    Py_INCREF(type_);  // new ref: keeps the type (and so its address) alive
  }
  ~TypeMatchGuard() override { Py_DECREF(type_); }

  bool check(PyObject* value) const override { return Py_TYPE(value) == type_; }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject* value, const std::string& source) const override {
    return differs("type of " + quoted(source) + " changed", "type", name(), typeName(value));
  }
  std::string describe(const std::string& source) const override {
    return "type(" + source + ") is " + name();
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const TypeMatchGuard*>(&other);
    return o != nullptr && o->type_ == type_;
  }

 private:
  std::string name() const {
    std::string n = type_->tp_name;
    std::size_t dot = n.rfind('.');
    return dot == std::string::npos ? n : n.substr(dot + 1);
  }
  PyTypeObject* type_;  // new ref (owned)
};

// ---- ID_MATCH ---------------------------------------------------------------------------------

class IdMatchGuard final : public LeafGuard {
 public:
  explicit IdMatchGuard(PyObject* expected)
      : LeafGuard(GuardKind::kIdMatch), expected_(expected), label_(objectLabel(expected)) {
    ErrorSaver saved;
    weak_ = PyWeakref_NewRef(expected, nullptr);  // new ref, or NULL: type has no weakrefs
    if (weak_ == nullptr) {
      PyErr_Clear();
      Py_INCREF(expected);  // new ref: hold the object itself
      strong_ = true;
    }
  }
  ~IdMatchGuard() override {
    if (strong_) {
      Py_DECREF(expected_);
    } else {
      Py_DECREF(weak_);
    }
  }

  bool check(PyObject* value) const override {
    // With a weak reference, the address alone could be a new object at a dead one's address:
    // also require that the referent is still alive and is this object.
    return value == expected_ && (strong_ || PyWeakref_GET_OBJECT(weak_) == value);
  }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject* value, const std::string& source) const override {
    std::string expected = label_;
    if (!strong_ && PyWeakref_GET_OBJECT(weak_) == Py_None) expected += " (since deleted)";
    return differs(quoted(source) + " is a different object", "object", expected,
                   objectLabel(value));
  }
  std::string describe(const std::string& source) const override {
    return source + " is " + label_;
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const IdMatchGuard*>(&other);
    return o != nullptr && o->expected_ == expected_;
  }

 private:
  PyObject* expected_;        // borrowed, kept alive only when strong_
  PyObject* weak_ = nullptr;  // new ref: weakref to expected_ (when !strong_)
  bool strong_ = false;       // expected_ is a new ref we own
  std::string label_;         // objectLabel(expected) at creation
};

// ---- EQUALS_MATCH -----------------------------------------------------------------------------

bool isSupportedConstant(PyObject* o) {
  if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
      PyUnicode_CheckExact(o)) {
    return true;
  }
  if (!PyTuple_CheckExact(o)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
    if (!isSupportedConstant(PyTuple_GET_ITEM(o, i))) return false;  // borrowed ref
  }
  return true;
}

// Same exact type and equal value, element-wise for tuples (so True never matches 1). NaN
// matches NaN: a NaN constant must not recompile on every call.
bool constantsMatch(PyObject* expected, PyObject* value) {
  if (value == expected) return true;
  if (Py_TYPE(value) != Py_TYPE(expected)) return false;
  if (PyFloat_CheckExact(expected)) {
    double a = PyFloat_AS_DOUBLE(expected), b = PyFloat_AS_DOUBLE(value);
    // -0.0 and 0.0 compare equal but behave differently (copysign, 1/x): keep them apart.
    return (a == b && std::signbit(a) == std::signbit(b)) || (std::isnan(a) && std::isnan(b));
  }
  if (PyTuple_CheckExact(expected)) {
    Py_ssize_t n = PyTuple_GET_SIZE(expected);
    if (PyTuple_GET_SIZE(value) != n) return false;
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!constantsMatch(PyTuple_GET_ITEM(expected, i), PyTuple_GET_ITEM(value, i))) {
        return false;
      }
    }
    return true;
  }
  int eq = PyObject_RichCompareBool(value, expected, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

class EqualsMatchGuard final : public LeafGuard {
 public:
  explicit EqualsMatchGuard(PyObject* constant)
      : LeafGuard(GuardKind::kEqualsMatch), constant_(constant) {
    Py_INCREF(constant_);  // new ref (immutable constant)
  }
  ~EqualsMatchGuard() override { Py_DECREF(constant_); }

  bool check(PyObject* value) const override { return constantsMatch(constant_, value); }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject* value, const std::string& source) const override {
    std::string expected = safeRepr(constant_), got = safeRepr(value);
    if (Py_TYPE(value) != Py_TYPE(constant_) || expected == got) {
      expected += " (" + typeName(constant_) + ")";
      got += " (" + typeName(value) + ")";
    }
    return differs(quoted(source) + " changed", "value", expected, got);
  }
  std::string describe(const std::string& source) const override {
    return source + " == " + safeRepr(constant_) + " (" + typeName(constant_) + ")";
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const EqualsMatchGuard*>(&other);
    if (o == nullptr) return false;
    ErrorSaver saved;
    return constantsMatch(constant_, o->constant_);
  }

 private:
  PyObject* constant_;  // new ref (owned)
};

// ---- LENGTH_CHECK -----------------------------------------------------------------------------

// len(value) without raising: -1 when value has no length.
Py_ssize_t lengthOf(PyObject* value) {
  if (PyList_CheckExact(value)) return PyList_GET_SIZE(value);
  if (PyTuple_CheckExact(value)) return PyTuple_GET_SIZE(value);
  if (PyDict_CheckExact(value)) return PyDict_GET_SIZE(value);
  Py_ssize_t n = PyObject_Length(value);
  if (n < 0) PyErr_Clear();
  return n;
}

class LengthCheckGuard final : public LeafGuard {
 public:
  explicit LengthCheckGuard(Py_ssize_t length)
      : LeafGuard(GuardKind::kLengthCheck), length_(length) {}

  bool check(PyObject* value) const override { return lengthOf(value) == length_; }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject* value, const std::string& source) const override {
    ErrorSaver saved;
    Py_ssize_t n = lengthOf(value);
    std::string got = n < 0 ? typeName(value) + " without a length" : std::to_string(n);
    return differs("length of " + quoted(source) + " changed", "length",
                   std::to_string(length_), got);
  }
  std::string describe(const std::string& source) const override {
    return "len(" + source + ") == " + std::to_string(length_);
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const LengthCheckGuard*>(&other);
    return o != nullptr && o->length_ == length_;
  }

 private:
  Py_ssize_t length_;
};

// ---- DICT_KEYS --------------------------------------------------------------------------------

std::string keyList(PyObject* dict) {
  std::string out = "[";
  Py_ssize_t pos = 0;
  PyObject *key = nullptr, *value = nullptr;  // borrowed refs
  bool first = true;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (!first) out += ", ";
    first = false;
    out += safeRepr(key, 40);
  }
  return out + "]";
}

class DictKeysGuard final : public LeafGuard {
 public:
  explicit DictKeysGuard(PyObject* dict)
      : LeafGuard(GuardKind::kDictKeys), keysText_(keyList(dict)) {
    Py_ssize_t pos = 0;
    PyObject *key = nullptr, *value = nullptr;  // borrowed refs
    while (PyDict_Next(dict, &pos, &key, &value)) {
      Py_INCREF(key);  // new ref, owned by keys_
      keys_.push_back(key);
    }
  }
  ~DictKeysGuard() override {
    for (PyObject* k : keys_) Py_DECREF(k);
  }

  bool check(PyObject* value) const override {
    if (!PyDict_Check(value) || PyDict_GET_SIZE(value) != static_cast<Py_ssize_t>(keys_.size())) {
      return false;
    }
    Py_ssize_t pos = 0;
    PyObject *key = nullptr, *item = nullptr;  // borrowed refs
    for (PyObject* expected : keys_) {
      if (!PyDict_Next(value, &pos, &key, &item)) return false;
      if (key == expected) continue;  // interned str keys: the usual case
      if (Py_TYPE(key) != Py_TYPE(expected)) return false;
      int eq = PyObject_RichCompareBool(key, expected, Py_EQ);
      if (eq != 1) {
        if (eq < 0) PyErr_Clear();
        return false;
      }
    }
    return true;
  }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject* value, const std::string& source) const override {
    std::string got = PyDict_Check(value) ? keyList(value) : typeName(value) + " (not a dict)";
    return differs("keys of " + quoted(source) + " changed", "keys", keysText_, got);
  }
  std::string describe(const std::string& source) const override {
    return "list(" + source + ".keys()) == " + keysText_;
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const DictKeysGuard*>(&other);
    return o != nullptr && o->keys_ == keys_;
  }

 private:
  std::vector<PyObject*> keys_;  // new refs (owned), in dict order
  std::string keysText_;         // "['lr', 'wd']"
};

// ---- IS_NONE / NOT_NONE -----------------------------------------------------------------------

class NoneGuard final : public LeafGuard {
 public:
  explicit NoneGuard(bool wantNone)
      : LeafGuard(wantNone ? GuardKind::kIsNone : GuardKind::kNotNone), wantNone_(wantNone) {}

  bool check(PyObject* value) const override { return (value == Py_None) == wantNone_; }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    if (wantNone_) return quoted(source) + " is no longer None: got " + typeName(value);
    return quoted(source) + " is now None";
  }
  std::string describe(const std::string& source) const override {
    return source + (wantNone_ ? " is None" : " is not None");
  }
  bool sameAs(const LeafGuard& other) const override { return other.kind() == kind(); }

 private:
  bool wantNone_;
};

// ---- HASATTR ----------------------------------------------------------------------------------

class HasAttrGuard final : public LeafGuard {
 public:
  HasAttrGuard(PyObject* name, std::string text, bool present)
      : LeafGuard(GuardKind::kHasAttr), name_(name), text_(std::move(text)), present_(present) {}
  ~HasAttrGuard() override { Py_DECREF(name_); }

  bool check(PyObject* value) const override {
    PyObject* attr = PyObject_GetAttr(value, name_);  // new ref or NULL
    if (attr != nullptr) {
      Py_DECREF(attr);
      return present_;
    }
    bool missing = PyErr_ExceptionMatches(PyExc_AttributeError);
    PyErr_Clear();
    return missing && !present_;  // any other error fails the guard
  }
  std::string describeFailure(PyObject*, const std::string& source) const override {
    return quoted(source) + (present_ ? " no longer has" : " now has") + " attribute '" + text_ +
           "'";
  }
  std::string describe(const std::string& source) const override {
    return std::string(present_ ? "" : "not ") + "hasattr(" + source + ", '" + text_ + "')";
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const HasAttrGuard*>(&other);
    return o != nullptr && o->text_ == text_ && o->present_ == present_;
  }

 private:
  PyObject* name_;    // new ref: interned attribute name
  std::string text_;  // the name as text
  bool present_;      // expected hasattr() result
};

class ModuleCallGuard final : public LeafGuard {
 public:
  ModuleCallGuard() : LeafGuard(GuardKind::kModuleCall) {
    for (int i = 0; i < 5; ++i) names_[i] = PyUnicode_InternFromString(kNames[i]);  // new refs, kept
  }

  bool check(PyObject* value) const override { return whatChanged(value) == nullptr; }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    const char* what = whatChanged(value);
    if (what == nullptr) return quoted(source) + " is unchanged";
    if (std::string(what) == "forward") return "module " + quoted(source) + " now has an instance attribute 'forward'";
    return "module " + quoted(source) + " now has " + std::string(what).substr(1) + " (" + what + " is not empty)";
  }
  std::string describe(const std::string& source) const override {
    return source + " has no hooks and no instance forward";
  }
  bool sameAs(const LeafGuard& other) const override { return dynamic_cast<const ModuleCallGuard*>(&other) != nullptr; }

 private:
  // (_backward_pre_hooks: torch 2.x's register_full_backward_pre_hook.)
  static constexpr const char* kNames[5] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                            "_backward_pre_hooks", "forward"};
  // The first thing that would change the call, or null.
  const char* whatChanged(PyObject* value) const {
    PyObject** slot = _PyObject_GetDictPtr(value);  // borrowed: the instance dict's slot
    if (slot == nullptr || *slot == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
    for (int i = 0; i < 4; ++i) {
      PyObject* hooks = PyDict_GetItemWithError(*slot, names_[i]);  // borrowed ref
      if (hooks == nullptr) {
        PyErr_Clear();
        continue;
      }
      if (!PyDict_Check(hooks) || PyDict_GET_SIZE(hooks) != 0) return kNames[i];
    }
    int r = PyDict_Contains(*slot, names_[4]);
    if (r < 0) PyErr_Clear();
    return r == 1 ? kNames[4] : nullptr;
  }
  PyObject* names_[5];  // interned, kept for the process
};

class NoInstanceAttrGuard final : public LeafGuard {
 public:
  NoInstanceAttrGuard(PyObject* name, std::string text)
      : LeafGuard(GuardKind::kNoInstanceAttr), name_(name), text_(std::move(text)) {}
  ~NoInstanceAttrGuard() override { Py_DECREF(name_); }

  bool check(PyObject* value) const override {
    PyObject** slot = _PyObject_GetDictPtr(value);  // borrowed: the instance dict's slot
    if (slot == nullptr || *slot == nullptr) {
      PyErr_Clear();
      return true;  // no instance dict: nothing can shadow the class attribute
    }
    int r = PyDict_Contains(*slot, name_);
    if (r < 0) PyErr_Clear();
    return r == 0;
  }
  std::string describeFailure(PyObject*, const std::string& source) const override {
    return quoted(source) + " now has an instance attribute '" + text_ + "' hiding the class's";
  }
  std::string describe(const std::string& source) const override {
    return "'" + text_ + "' not in " + source + ".__dict__";
  }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const NoInstanceAttrGuard*>(&other);
    return o != nullptr && o->text_ == text_;
  }

 private:
  PyObject* name_;    // new ref: interned attribute name
  std::string text_;  // the name as text
};

// ---- AUTOCAST ---------------------------------------------------------------------------------

class AutocastGuard final : public LeafGuard {
 public:
  explicit AutocastGuard(std::string state) : LeafGuard(GuardKind::kAutocast), state_(std::move(state)) {}

  bool check(PyObject*) const override { return currentAutocastState() == state_; }
  std::string describeFailure(PyObject* value, const std::string& source) const override {
    return mismatch(value, source).text;
  }
  GuardMismatch mismatch(PyObject*, const std::string&) const override {
    return differs("autocast changed", "autocast", state_, currentAutocastState());
  }
  std::string describe(const std::string&) const override { return "autocast is " + state_; }
  bool sameAs(const LeafGuard& other) const override {
    auto* o = dynamic_cast<const AutocastGuard*>(&other);
    return o != nullptr && o->state_ == state_;
  }

 private:
  std::string state_;
};

// torch.is_autocast_enabled() (CUDA) / torch.is_autocast_cpu_enabled(), or
// torch.is_autocast_enabled(device) where the per-device form is the only one; false on error.
bool autocastOn(const char* device) {
  ErrorSaver saved;
  static PyObject* torch = PyImport_ImportModule("torch");  // new ref, kept
  if (torch == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool cpu = std::string(device) == "cpu";
  PyObject* r = nullptr;  // new ref
  // torch 2.x (get_autocast_dtype exists) deprecates the per-device names: ask by device there.
  PyObject* fn = PyObject_HasAttrString(torch, "get_autocast_dtype")
                     ? nullptr
                     : PyObject_GetAttrString(torch, cpu ? "is_autocast_cpu_enabled" : "is_autocast_enabled");  // new
  if (fn != nullptr) r = PyObject_CallNoArgs(fn);
  Py_XDECREF(fn);
  if (r == nullptr) {
    PyErr_Clear();
    PyObject* any = PyObject_GetAttrString(torch, "is_autocast_enabled");  // new ref
    if (any != nullptr) r = PyObject_CallFunction(any, "s", device);
    Py_XDECREF(any);
  }
  bool on = r != nullptr && PyObject_IsTrue(r) == 1;
  Py_XDECREF(r);
  PyErr_Clear();
  return on;
}

// The dtype autocast casts to on `device`: torch.get_autocast_dtype(device) (torch 2.x), else
// get_autocast_cpu_dtype() / get_autocast_gpu_dtype(); "?" on error.
std::string autocastDtype(const char* device) {
  ErrorSaver saved;
  static PyObject* torch = PyImport_ImportModule("torch");  // new ref, kept
  if (torch == nullptr) {
    PyErr_Clear();
    return "?";
  }
  PyObject* r = nullptr;  // new ref
  if (PyObject_HasAttrString(torch, "get_autocast_dtype")) {
    r = PyObject_CallMethod(torch, "get_autocast_dtype", "s", device);
  } else {
    r = PyObject_CallMethod(torch, std::string(device) == "cpu" ? "get_autocast_cpu_dtype" : "get_autocast_gpu_dtype", nullptr);
  }
  PyObject* s = r ? PyObject_Str(r) : nullptr;  // new ref
  std::string out = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : "?";
  Py_XDECREF(s);
  Py_XDECREF(r);
  PyErr_Clear();
  return out;
}

}  // namespace

std::string currentAutocastState() {
  const bool cpu = autocastOn("cpu"), cuda = autocastOn("cuda");
  if (!cpu && !cuda) return "off";
  std::string s;
  if (cpu) s = "cpu(" + autocastDtype("cpu") + ")";
  if (cuda) s += std::string(cpu ? "+" : "") + "cuda(" + autocastDtype("cuda") + ")";
  return s;
}

LeafGuardPtr makeAutocastFromCurrent() { return std::make_unique<AutocastGuard>(currentAutocastState()); }

LeafGuardPtr makeModuleCall() { return std::make_unique<ModuleCallGuard>(); }

LeafGuardPtr makeNoInstanceAttr(const std::string& name) {
  PyObject* nameObj = PyUnicode_InternFromString(name.c_str());  // new ref, owned by the guard
  if (nameObj == nullptr) {
    PyErr_Clear();
    throw UserError(UserErrorKind::kInvalidArgument, "NO_INSTANCE_ATTR name is not valid UTF-8");
  }
  return std::make_unique<NoInstanceAttrGuard>(nameObj, name);
}

LeafGuardPtr makeTypeMatch(PyObject* example) {
  return std::make_unique<TypeMatchGuard>(Py_TYPE(example));
}

LeafGuardPtr makeIdMatch(PyObject* expected) { return std::make_unique<IdMatchGuard>(expected); }

LeafGuardPtr makeEqualsMatch(PyObject* constant) {
  if (!isSupportedConstant(constant)) {
    throw UserError(UserErrorKind::kInvalidArgument,
                    "EQUALS_MATCH needs an int, float, str, bool, None or a tuple of those; got " +
                        typeName(constant),
                    {}, "other values cannot be compared cheaply and safely on every call",
                    "guard the object's identity (ID_MATCH) or its type (TYPE_MATCH) instead");
  }
  return std::make_unique<EqualsMatchGuard>(constant);
}

LeafGuardPtr makeLengthCheck(Py_ssize_t length) {
  DYNAMO_USER_CHECK(length >= 0, UserErrorKind::kInvalidArgument,
                    "LENGTH_CHECK needs a length >= 0, got ", length);
  return std::make_unique<LengthCheckGuard>(length);
}

LeafGuardPtr makeDictKeys(PyObject* exampleDict) {
  DYNAMO_USER_CHECK(PyDict_Check(exampleDict), UserErrorKind::kInvalidArgument,
                    "DICT_KEYS needs a dict, got ", typeName(exampleDict));
  return std::make_unique<DictKeysGuard>(exampleDict);
}

LeafGuardPtr makeIsNone() { return std::make_unique<NoneGuard>(true); }
LeafGuardPtr makeNotNone() { return std::make_unique<NoneGuard>(false); }

LeafGuardPtr makeHasAttr(const std::string& name, bool present) {
  PyObject* nameObj = PyUnicode_InternFromString(name.c_str());  // new ref, owned by the guard
  if (nameObj == nullptr) {
    PyErr_Clear();
    throw UserError(UserErrorKind::kInvalidArgument, "HASATTR name is not valid UTF-8");
  }
  return std::make_unique<HasAttrGuard>(nameObj, name, present);
}

}  // namespace dynamo::core
