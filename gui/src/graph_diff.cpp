// diffGraphs: node matching in rounds, changes, and the merged graph (see graph_diff.h).
#include "dynamo/gui/graph_diff.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <sstream>
#include <unordered_map>

namespace dynamo::gui {
namespace {

bool isCall(const InspectNode& n) { return n.op == "call_function" || n.op == "call_method"; }

/// Base name -> family (op_families.def).
const std::unordered_map<std::string, std::string>& families() {
  static const std::unordered_map<std::string, std::string> table = [] {
    std::unordered_map<std::string, std::string> t;
    auto add = [&](const char* family, const char* names) {
      std::istringstream in(names);
      for (std::string name; in >> name;) t[name] = family;
    };
#define DYNAMO_OP_FAMILY(family, names) add(family, names);
#include "dynamo/gui/op_families.def"
#undef DYNAMO_OP_FAMILY
    return t;
  }();
  return table;
}


std::string loc(const InspectNode& n) {
  return n.location.file + ":" + std::to_string(n.location.line);
}

class Matcher {
 public:
  Matcher(const InspectGraph& a, const InspectGraph& b) : a_(a), b_(b) {
    d_.crossDialect = dialectOf(a) != dialectOf(b);
    d_.afterOfBefore.assign(a.nodes().size(), -1);
    d_.beforeOfAfter.assign(b.nodes().size(), -1);
    d_.matchRound.assign(b.nodes().size(), 0);
  }

  GraphDiff run() {
    byKey(1, [](const InspectNode& n) { return n.op == "placeholder" ? "in|" + n.target : std::string(); });
    byKey(1, [](const InspectNode& n) { return n.op == "output" ? std::string("output") : std::string(); });
    byKey(2, [this](const InspectNode& n) {
      return isCall(n) ? opKey(n) + "|" + n.modulePath + "|" + loc(n) : std::string();
    });
    byKey(3, [this](const InspectNode& n) { return isCall(n) ? opKey(n) + "|" + loc(n) : std::string(); });
    if (d_.crossDialect)  // ATen graphs carry no source lines: the module alone
      byKey(3, [this](const InspectNode& n) {
        return isCall(n) && !n.modulePath.empty() ? opKey(n) + "|" + n.modulePath : std::string();
      });
    structural();
    bySequence();
    finish();
    return std::move(d_);
  }

 private:
  void match(int a, int b, int round) {
    d_.afterOfBefore[static_cast<size_t>(a)] = b;
    d_.beforeOfAfter[static_cast<size_t>(b)] = a;
    d_.matchRound[static_cast<size_t>(b)] = round;
  }
  /// What must be equal for two calls to be the same op: op and target, or across dialects
  /// the op family (op_families.def).
  std::string opKey(const InspectNode& n) const { return d_.crossDialect ? opFamily(n) : n.op + "|" + n.target; }
  bool freeA(int i) const { return d_.afterOfBefore[static_cast<size_t>(i)] < 0; }
  bool freeB(int i) const { return d_.beforeOfAfter[static_cast<size_t>(i)] < 0; }

  template <typename KeyFn>
  void byKey(int round, KeyFn key) {
    std::unordered_map<std::string, std::deque<int>> pending;
    for (const InspectNode& n : a_.nodes())
      if (freeA(n.index)) {
        std::string k = key(n);
        if (!k.empty()) pending[k].push_back(n.index);
      }
    for (const InspectNode& n : b_.nodes()) {
      if (!freeB(n.index)) continue;
      std::string k = key(n);
      if (k.empty()) continue;
      auto it = pending.find(k);
      if (it == pending.end() || it->second.empty()) continue;
      match(it->second.front(), n.index, round);
      it->second.pop_front();
    }
  }

  /// Round 4: the same target applied to matched inputs.
  void structural() {
    for (bool found = true; found;) {
      found = false;
      std::unordered_map<std::string, std::deque<int>> pending;
      for (const InspectNode& n : a_.nodes()) {
        if (!freeA(n.index) || !isCall(n) || n.inputs.empty()) continue;
        std::string k = opKey(n);
        bool all = true;
        for (int in : n.inputs) {
          const int mapped = d_.afterOfBefore[static_cast<size_t>(in)];
          if (mapped < 0) all = false;
          k += "|" + std::to_string(mapped);
        }
        if (all) pending[k].push_back(n.index);
      }
      for (const InspectNode& n : b_.nodes()) {
        if (!freeB(n.index) || !isCall(n) || n.inputs.empty()) continue;
        std::string k = opKey(n);
        for (int in : n.inputs) k += "|" + std::to_string(in);
        auto it = pending.find(k);
        if (it == pending.end() || it->second.empty()) continue;
        match(it->second.front(), n.index, 4);
        it->second.pop_front();
        found = true;
      }
    }
  }

  /// Round 5: the longest common subsequence of the remaining calls' targets.
  void bySequence() {
    std::vector<int> ra, rb;
    for (const InspectNode& n : a_.nodes())
      if (freeA(n.index) && isCall(n)) ra.push_back(n.index);
    for (const InspectNode& n : b_.nodes())
      if (freeB(n.index) && isCall(n)) rb.push_back(n.index);
    if (ra.empty() || rb.empty()) return;
    if (ra.size() * rb.size() > 4'000'000) {  // too large for the table: k-th with k-th
      byKey(5, [this](const InspectNode& n) { return isCall(n) ? opKey(n) : std::string(); });
      return;
    }
    const size_t n = ra.size(), m = rb.size();
    std::vector<std::string> keysA, keysB;
    for (int i : ra) keysA.push_back(opKey(a_.node(i)));
    for (int j : rb) keysB.push_back(opKey(b_.node(j)));
    std::vector<std::vector<int>> len(n + 1, std::vector<int>(m + 1, 0));
    for (size_t i = n; i-- > 0;)
      for (size_t j = m; j-- > 0;)
        len[i][j] = keysA[i] == keysB[j]
                        ? len[i + 1][j + 1] + 1
                        : std::max(len[i + 1][j], len[i][j + 1]);
    for (size_t i = 0, j = 0; i < n && j < m;) {
      if (keysA[i] == keysB[j]) {
        match(ra[i], rb[j], 5);
        ++i;
        ++j;
      } else if (len[i + 1][j] >= len[i][j + 1]) {
        ++i;
      } else {
        ++j;
      }
    }
  }

  /// Node references in an argument text, renamed to their counterparts in `after`.
  std::string renamedArgs(const InspectNode& n) const {
    std::string out;
    const std::string& s = n.args;
    for (size_t i = 0; i < s.size();) {
      if (s[i] != '%') {
        out += s[i++];
        continue;
      }
      size_t j = i + 1;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      const std::string name = s.substr(i + 1, j - i - 1);
      std::string renamed = "?" + name;
      for (int in : n.inputs)
        if (a_.node(in).name == name) {
          const int mapped = d_.afterOfBefore[static_cast<size_t>(in)];
          if (mapped >= 0) renamed = b_.node(mapped).name;
        }
      out += "%" + renamed;
      i = j;
    }
    return out;
  }

  std::vector<std::string> changesOf(const InspectNode& a, const InspectNode& b) const {
    std::vector<std::string> out;
    if (d_.crossDialect) {  // targets, arguments, strides and modules differ by nature
      if (!a.tensor.empty() && !b.tensor.empty() && a.tensor != b.tensor)  // a tuple has none
        out.push_back("tensor: " + (a.tensor.empty() ? "-" : a.tensor) + " -> " + (b.tensor.empty() ? "-" : b.tensor));
      return out;
    }
    if (a.target != b.target) out.push_back("target: " + a.target + " -> " + b.target);
    if (a.tensorDetail != b.tensorDetail)
      out.push_back("tensor: " + (a.tensorDetail.empty() ? "-" : a.tensorDetail) + " -> " +
                    (b.tensorDetail.empty() ? "-" : b.tensorDetail));
    if (renamedArgs(a) != b.args) out.push_back("args: (" + a.args + ") -> (" + b.args + ")");
    if (a.modulePath != b.modulePath)
      out.push_back("module: " + (a.modulePath.empty() ? "(top)" : a.modulePath) + " -> " +
                    (b.modulePath.empty() ? "(top)" : b.modulePath));
    if (a.location.file != b.location.file || a.location.sourceLine != b.location.sourceLine)
      out.push_back("source: " + a.location.str() + " " + a.location.sourceLine + " -> " +
                    b.location.str() + " " + b.location.sourceLine);
    return out;
  }

  void finish() {
    std::vector<InspectNode> merged;
    merged.reserve(a_.nodes().size() + b_.nodes().size());
    for (const InspectNode& n : b_.nodes()) {
      InspectNode m = n;
      const int a = d_.beforeOfAfter[static_cast<size_t>(n.index)];
      if (a < 0) {
        m.diff = DiffStatus::kAdded;
        ++d_.added;
      } else {
        ++d_.matched;
        m.changes = changesOf(a_.node(a), n);
        m.diff = m.changes.empty() ? DiffStatus::kSame : DiffStatus::kChanged;
        if (!m.changes.empty()) d_.changed.push_back(NodeChange{a, n.index, m.changes});
      }
      merged.push_back(std::move(m));
      d_.mergedToAfter.push_back(n.index);
      d_.mergedToBefore.push_back(a);
    }
    std::vector<int> mergedOfRemoved(a_.nodes().size(), -1);
    for (const InspectNode& n : a_.nodes())
      if (freeA(n.index)) {
        mergedOfRemoved[static_cast<size_t>(n.index)] = static_cast<int>(merged.size());
        InspectNode m = n;
        m.diff = DiffStatus::kRemoved;
        merged.push_back(std::move(m));
        d_.mergedToAfter.push_back(-1);
        d_.mergedToBefore.push_back(n.index);
        ++d_.removed;
      }
    auto mergedIndexOfBefore = [&](int a) {
      const int b = d_.afterOfBefore[static_cast<size_t>(a)];
      return b >= 0 ? b : mergedOfRemoved[static_cast<size_t>(a)];
    };
    for (const InspectNode& n : a_.nodes()) {
      const int r = mergedOfRemoved[static_cast<size_t>(n.index)];
      if (r < 0) continue;
      std::vector<int>& ins = merged[static_cast<size_t>(r)].inputs;
      for (int& in : ins) in = mergedIndexOfBefore(in);
      for (int user : n.users) {  // edges from a removed node into kept nodes
        const int b = d_.afterOfBefore[static_cast<size_t>(user)];
        if (b >= 0) merged[static_cast<size_t>(b)].inputs.push_back(r);
      }
    }
    d_.merged = InspectGraph::make(std::move(merged), textHash(a_.hash() + "|diff|" + b_.hash()));
  }

  const InspectGraph& a_;
  const InspectGraph& b_;
  GraphDiff d_;
};

}  // namespace

std::string opFamily(const InspectNode& node) {
  const auto it = families().find(node.shortName);
  return it == families().end() ? node.shortName : it->second;
}

GraphDialect dialectOf(const InspectGraph& graph) {
  size_t calls = 0, aten = 0;
  for (const InspectNode& n : graph.nodes()) {
    if (!isCall(n)) continue;
    ++calls;
    if (n.target.find("ops.aten.") != std::string::npos) ++aten;
  }
  return calls > 0 && 2 * aten > calls ? GraphDialect::kAten : GraphDialect::kTorch;
}

GraphDiff diffGraphs(const InspectGraph& before, const InspectGraph& after) {
  return Matcher(before, after).run();
}

std::string diffSummary(const GraphDiff& diff) {
  return std::to_string(diff.matched) + " nodes matched, " + std::to_string(diff.added) +
         " added, " + std::to_string(diff.removed) + " removed, " +
         std::to_string(diff.changed.size()) + " changed" +
         (diff.crossDialect ? " (torch-level vs ATen: matched by op family, shapes and dtypes compared)" : "");
}

}  // namespace dynamo::gui
