// GuardSet: guards grouped by source into a tree, checked with each source fetched once.
//
//   globals_: GRAD_MODE, DEFAULT_DTYPE          (no fetch)
//   roots_:   x ──── TENSOR_MATCH
//             self ─ ID_MATCH
//               └ self.fc1 (module attr) ─ ID_MATCH
//                   ├ self.fc1.weight ─ TENSOR_MATCH
//                   └ self.fc1.bias ─── TENSOR_MATCH
//
// A node fetches its value from its parent's value (roots from the frame), runs its leaves
// (cheapest first), then its children (cheapest subtree first). check() stops at the first
// failure; failures() walks everything and explains each failure.
#include <algorithm>
#include <functional>
#include <unordered_map>

#include "dynamo/core/guards.h"
#include "py_text.h"

namespace dynamo::core {

// ---- kinds ------------------------------------------------------------------------------------

const std::vector<GuardKindInfo>& guardKinds() {
  static const std::vector<GuardKindInfo> kinds = {
#define DYNAMO_GUARD_KIND(Id, NAME, COST, DESCRIPTION) \
  {GuardKind::k##Id, #NAME, COST, DESCRIPTION},
#include "dynamo/core/guard_kinds.def"
  };
  return kinds;
}

const GuardKindInfo& guardKindInfo(GuardKind kind) {
  return guardKinds()[static_cast<std::size_t>(kind)];
}

std::string GuardFailure::str() const {
  if (!where.known()) return reason;
  std::string out = reason + "\n  (guard created at " + where.str();
  if (!where.sourceLine.empty()) out += ": " + where.sourceLine;
  return out + ")";
}

// ---- the tree ---------------------------------------------------------------------------------

namespace detail {

/// One source in the tree: its leaves and the sources reached from it.
struct GuardNode {
  Source source;
  std::vector<std::pair<LeafGuardPtr, SourceLocation>> leaves;  // sorted by cost
  std::vector<std::unique_ptr<GuardNode>> children;            // sorted by minCost
  int minCost = 1 << 20;  // cheapest guard in this subtree

  // value: new ref or NULL (Python error set); consumed.
  bool check(PyObject* value) const {
    if (value == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool ok = true;
    for (const auto& leaf : leaves) {
      if (!leaf.first->check(value)) {
        ok = false;
        break;
      }
    }
    for (std::size_t i = 0; ok && i < children.size(); ++i) {
      const GuardNode& child = *children[i];
      ok = child.check(child.source.fetchFrom(value));  // new ref, consumed by the child
    }
    Py_DECREF(value);
    return ok;
  }

  // Slow path. value: new ref or NULL (Python error set); consumed.
  void collect(PyObject* value, std::vector<GuardFailure>& out) const {
    if (value == nullptr) {
      std::string error = guards_detail::takeErrorText();
      const std::pair<LeafGuardPtr, SourceLocation>* first = firstGuard();
      GuardFailure f{first ? first->first->kind() : GuardKind::kTypeMatch, source.name(),
                     "could not read '" + source.name() + "': " + error,
                     first ? first->second : SourceLocation{}};
      out.push_back(std::move(f));
      return;
    }
    for (const auto& [leaf, where] : leaves) {
      if (leaf->check(value)) continue;
      guards_detail::ErrorSaver saved;
      GuardMismatch m = leaf->mismatch(value, source.name());
      GuardFailure f{leaf->kind(), source.name(), std::move(m.text), where};
      f.property = std::move(m.property);
      f.dim = m.dim;
      f.expected = std::move(m.expected);
      f.seen = std::move(m.seen);
      out.push_back(std::move(f));
    }
    for (const auto& child : children) child->collect(child->source.fetchFrom(value), out);
    Py_DECREF(value);
  }

  // The first guard in this subtree, in check order (names the user line of a fetch failure).
  const std::pair<LeafGuardPtr, SourceLocation>* firstGuard() const {
    if (!leaves.empty()) return &leaves.front();
    for (const auto& child : children) {
      if (const auto* g = child->firstGuard()) return g;
    }
    return nullptr;
  }

  void list(std::vector<GuardInfo>& out) const {
    for (const auto& [leaf, where] : leaves) {
      out.push_back(GuardInfo{leaf->kind(), guardKindInfo(leaf->kind()).name, source.name(),
                              leaf->describe(source.name()), where});
    }
    for (const auto& child : children) child->list(out);
  }

  // Sorts leaves and children cheapest first (stable: insertion order breaks ties); sets minCost.
  void order() {
    std::stable_sort(leaves.begin(), leaves.end(), [](const auto& a, const auto& b) {
      return guardKindInfo(a.first->kind()).cost < guardKindInfo(b.first->kind()).cost;
    });
    for (auto& child : children) child->order();
    std::stable_sort(children.begin(), children.end(),
                     [](const auto& a, const auto& b) { return a->minCost < b->minCost; });
    minCost = 1 << 20;
    if (!leaves.empty()) minCost = guardKindInfo(leaves.front().first->kind()).cost;
    if (!children.empty()) minCost = std::min(minCost, children.front()->minCost);
  }
};

}  // namespace detail

// ---- GuardSet ---------------------------------------------------------------------------------

GuardSet::GuardSet() = default;
GuardSet::GuardSet(GuardSet&&) noexcept = default;
GuardSet& GuardSet::operator=(GuardSet&&) noexcept = default;
GuardSet::~GuardSet() = default;

bool GuardSet::check(const FrameValues& frame) const {
  for (const auto& g : globals_) {
    if (!g.first->check(nullptr)) return false;
  }
  for (const auto& root : roots_) {
    if (!root->check(root->source.fetchRoot(frame))) return false;
  }
  return true;
}

std::vector<GuardFailure> GuardSet::failures(const FrameValues& frame) const {
  guards_detail::ErrorSaver saved;
  std::vector<GuardFailure> out;
  for (const auto& [leaf, where] : globals_) {
    if (!leaf->check(nullptr)) {
      GuardMismatch m = leaf->mismatch(nullptr, "");
      GuardFailure f{leaf->kind(), "", std::move(m.text), where};
      f.property = std::move(m.property);
      f.expected = std::move(m.expected);
      f.seen = std::move(m.seen);
      out.push_back(std::move(f));
    }
  }
  for (const auto& root : roots_) root->collect(root->source.fetchRoot(frame), out);
  return out;
}

std::string GuardSet::failureReason(const FrameValues& frame) const {
  std::string out;
  for (const GuardFailure& f : failures(frame)) {
    if (!out.empty()) out += "\n";
    out += f.str();
  }
  return out;
}

std::vector<GuardInfo> GuardSet::guards() const {
  std::vector<GuardInfo> out;
  for (const auto& [leaf, where] : globals_) {
    out.push_back(GuardInfo{leaf->kind(), guardKindInfo(leaf->kind()).name, "",
                            leaf->describe(""), where});
  }
  for (const auto& root : roots_) root->list(out);
  return out;
}

std::string GuardSet::describe() const {
  std::vector<GuardInfo> all = guards();
  std::size_t kindWidth = 0, width = 0;
  for (const GuardInfo& g : all) {
    kindWidth = std::max(kindWidth, g.kindName.size() + 2);
    width = std::max(width, g.checked.size());
  }
  std::string out;
  for (const GuardInfo& g : all) {
    std::string line = g.kindName;
    line.resize(kindWidth, ' ');
    line += g.checked;
    if (g.where.known()) {
      line.resize(kindWidth + width, ' ');
      line += "  # " + g.where.str();
      if (!g.where.sourceLine.empty()) line += ": " + g.where.sourceLine;
    }
    out += line + "\n";
  }
  return out;
}

// ---- GuardSetBuilder --------------------------------------------------------------------------

struct GuardSetBuilder::Pending {
  Source source;  // null for global-state guards
  LeafGuardPtr guard;
  SourceLocation where;
};

GuardSetBuilder::GuardSetBuilder() = default;
GuardSetBuilder::~GuardSetBuilder() = default;

std::size_t GuardSetBuilder::size() const { return pending_.size(); }

void GuardSetBuilder::truncate(std::size_t n) {
  if (n < pending_.size()) pending_.resize(n);
}

bool GuardSetBuilder::add(const Source& source, LeafGuardPtr guard, SourceLocation where) {
  DYNAMO_INTERNAL_ASSERT(guard != nullptr, "null guard");
  DYNAMO_USER_CHECK(guard->needsSource() == static_cast<bool>(source),
                    UserErrorKind::kInvalidArgument, guardKindInfo(guard->kind()).name,
                    guard->needsSource() ? " needs a source" : " takes no source");
  for (const Pending& p : pending_) {  // trace time; guard sets are small
    if (p.source == source && p.guard->sameAs(*guard)) return false;
  }
  pending_.push_back(Pending{source, std::move(guard), std::move(where)});
  return true;
}

GuardSet GuardSetBuilder::build() {
  GuardSet set;
  std::unordered_map<Source, detail::GuardNode*, SourceHash> nodes;
  // The node of `source`, creating it and its ancestors on first use.
  std::function<detail::GuardNode*(const Source&)> nodeFor = [&](const Source& source) {
    auto it = nodes.find(source);
    if (it != nodes.end()) return it->second;
    auto node = std::make_unique<detail::GuardNode>();
    node->source = source;
    detail::GuardNode* raw = node.get();
    if (source.isRoot()) {
      set.roots_.push_back(std::move(node));
    } else {
      nodeFor(source.base())->children.push_back(std::move(node));
    }
    nodes.emplace(source, raw);
    return raw;
  };
  for (Pending& p : pending_) {
    ++set.count_;
    if (!p.source) {
      set.globals_.emplace_back(std::move(p.guard), std::move(p.where));
    } else {
      nodeFor(p.source)->leaves.emplace_back(std::move(p.guard), std::move(p.where));
    }
  }
  pending_.clear();
  detail::GuardNode root;  // orders the roots the same way as children
  root.children = std::move(set.roots_);
  root.order();
  set.roots_ = std::move(root.children);
  return set;
}

}  // namespace dynamo::core
