// Overlays (see overlays.h): the .def rows, and the fills of one overlay over one graph.
#include "dynamo/gui/overlays.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace dynamo::gui {
namespace {

struct OverlayInfo {
  Overlay id;
  std::string_view name, description;
};
const OverlayInfo kOverlays[] = {
#define DYNAMO_OVERLAY(id, name, description) {Overlay::id, name, description},
#include "dynamo/gui/overlays.def"
};

struct RoleInfo {
  PartitionRole id;
  std::string_view name, colour;
};
const RoleInfo kRoles[] = {
    {PartitionRole::kNone, "", "#ffffff"},
#define DYNAMO_PARTITION_ROLE(id, name, fill, description) {PartitionRole::id, name, fill},
#include "dynamo/gui/overlays.def"
};

struct DiffInfo {
  DiffStatus id;
  std::string_view name, colour;
};
const DiffInfo kDiffKeys[] = {
#define DYNAMO_DIFF_KEY(status, name, fill, description) {DiffStatus::status, name, fill},
#include "dynamo/gui/overlays.def"
};

const std::string_view kSizeSteps[] = {
#define DYNAMO_SIZE_STEP(fill) fill,
#include "dynamo/gui/overlays.def"
};
constexpr int kNumSizeSteps = static_cast<int>(sizeof kSizeSteps / sizeof kSizeSteps[0]);

const std::string_view kFusionFills[] = {
#define DYNAMO_FUSION_FILL(fill) fill,
#include "dynamo/gui/overlays.def"
};
constexpr size_t kNumFusionFills = sizeof kFusionFills / sizeof kFusionFills[0];

enum class KernelKey {
#define DYNAMO_KERNEL_KEY(id, name, fill, description) id,
#include "dynamo/gui/overlays.def"
};
struct KernelKeyInfo {
  std::string_view name, colour;
};
const KernelKeyInfo kKernelKeys[] = {
#define DYNAMO_KERNEL_KEY(id, name, fill, description) {name, fill},
#include "dynamo/gui/overlays.def"
};
const KernelKeyInfo& kernelKey(KernelKey k) { return kKernelKeys[static_cast<size_t>(k)]; }

std::string formatMs(double ms) {
  char buf[32];
  if (ms >= 1000) std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
  else std::snprintf(buf, sizeof buf, "%.0f ms", ms);
  return buf;
}

constexpr std::string_view kNoValue = "#ffffff";  // a node the overlay says nothing about

template <typename Fn>
void forEachNode(const InspectGraph& g, int group, Fn&& fn) {
  for (int item : g.group(group).items) {
    if (item >= 0) fn(g.node(item));
    else forEachNode(g, ~item, fn);
  }
}

}  // namespace

std::string_view overlayName(Overlay o) { return kOverlays[static_cast<size_t>(o)].name; }
std::string_view overlayDescription(Overlay o) { return kOverlays[static_cast<size_t>(o)].description; }

const std::vector<Overlay>& allOverlays() {
  static const std::vector<Overlay> all = [] {
    std::vector<Overlay> v;
    for (const OverlayInfo& o : kOverlays) v.push_back(o.id);
    return v;
  }();
  return all;
}

std::string_view partitionRoleName(PartitionRole r) { return kRoles[static_cast<size_t>(r)].name; }
std::string_view partitionRoleColour(PartitionRole r) { return kRoles[static_cast<size_t>(r)].colour; }

std::string_view diffStatusColour(DiffStatus d) {
  for (const DiffInfo& k : kDiffKeys)
    if (k.id == d) return k.colour;
  return kNoValue;
}

bool overlayApplies(Overlay o, const InspectGraph& graph) {
  const auto any = [&](auto pred) {
    return std::any_of(graph.nodes().begin(), graph.nodes().end(), pred);
  };
  switch (o) {
    case Overlay::kOpKind: return true;
    case Overlay::kTensorSize: return any([](const InspectNode& n) { return n.tensorBytes > 0; });
    case Overlay::kPartition:
      return any([](const InspectNode& n) { return n.partition != PartitionRole::kNone; });
    case Overlay::kDiff: return any([](const InspectNode& n) { return n.diff != DiffStatus::kNone; });
    case Overlay::kFusionGroup:
    case Overlay::kCompileTime: return !graph.kernels().empty();
  }
  return false;
}

Overlay defaultOverlay(const InspectGraph& graph, int index) {
  if (!graph.kernels().empty()) return Overlay::kFusionGroup;
  return index < 0 ? Overlay::kPartition : Overlay::kOpKind;
}

std::string formatBytes(std::int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || v >= 10 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string_view fusionFill(int kernel) {
  return kernel < 0 ? kernelKey(KernelKey::kNoKernel).colour
                    : kFusionFills[static_cast<size_t>(kernel) % kNumFusionFills];
}

OverlayPainter::OverlayPainter(Overlay overlay, const InspectGraph& graph)
    : overlay_(overlay), graph_(graph) {
  if (overlay_ == Overlay::kCompileTime) {
    bool first = true;
    for (const InspectKernel& k : graph_.kernels()) {
      if (k.cacheHit || k.compileMs <= 0) continue;
      const double l = std::log2(k.compileMs);
      minLog_ = first ? l : std::min(minLog_, l);
      maxLog_ = first ? l : std::max(maxLog_, l);
      first = false;
    }
    return;
  }
  if (overlay_ != Overlay::kTensorSize) return;
  bool first = true;
  for (const InspectNode& n : graph_.nodes()) {
    if (n.tensorBytes <= 0) continue;
    const double l = std::log2(static_cast<double>(n.tensorBytes));
    minLog_ = first ? l : std::min(minLog_, l);
    maxLog_ = first ? l : std::max(maxLog_, l);
    first = false;
  }
}

int OverlayPainter::sizeStep(std::int64_t bytes) const {
  if (bytes <= 0) return -1;
  const double span = maxLog_ - minLog_;
  if (span <= 0) return kNumSizeSteps - 1;
  const double t = (std::log2(static_cast<double>(bytes)) - minLog_) / span;
  return std::clamp(static_cast<int>(t * kNumSizeSteps), 0, kNumSizeSteps - 1);
}

int OverlayPainter::logStep(double value) const {
  if (value <= 0) return -1;
  const double span = maxLog_ - minLog_;
  if (span <= 0) return kNumSizeSteps - 1;
  const double t = (std::log2(value) - minLog_) / span;
  return std::clamp(static_cast<int>(t * kNumSizeSteps), 0, kNumSizeSteps - 1);
}

std::vector<int> OverlayPainter::groupKernels(int group) const {
  std::set<int> ks;
  forEachNode(graph_, group, [&](const InspectNode& n) { ks.insert(n.kernels.begin(), n.kernels.end()); });
  return {ks.begin(), ks.end()};
}

std::string OverlayPainter::kernelTimeFill(int kernel) const {
  if (kernel < 0) return std::string(kernelKey(KernelKey::kNoKernel).colour);
  const InspectKernel& k = graph_.kernels()[static_cast<size_t>(kernel)];
  if (k.cacheHit) return std::string(kernelKey(KernelKey::kCacheHit).colour);
  const int s = logStep(k.compileMs);
  return std::string(s < 0 ? kernelKey(KernelKey::kNoKernel).colour : kSizeSteps[s]);
}

std::int64_t OverlayPainter::groupBytes(int group) const {
  std::int64_t most = -1;
  forEachNode(graph_, group, [&](const InspectNode& n) { most = std::max(most, n.tensorBytes); });
  return most;
}

std::vector<int> OverlayPainter::roleCounts(int group) const {
  std::vector<int> counts(sizeof kRoles / sizeof kRoles[0], 0);
  forEachNode(graph_, group, [&](const InspectNode& n) { ++counts[static_cast<size_t>(n.partition)]; });
  return counts;
}

PartitionRole OverlayPainter::groupRole(int group) const {
  // kNone is 0 and never wins; among the roles, the most frequent, ties to .def order.
  const std::vector<int> counts = roleCounts(group);
  size_t best = 0;
  for (size_t r = 1; r < counts.size(); ++r)
    if (counts[r] > 0 && (best == 0 || counts[r] > counts[best])) best = r;
  return static_cast<PartitionRole>(best);
}

std::string OverlayPainter::describeGroup(int group) const {
  std::string out;
  if (overlay_ == Overlay::kPartition) {
    const std::vector<int> counts = roleCounts(group);
    for (size_t r = 1; r < counts.size(); ++r)
      if (counts[r] > 0)
        out += (out.empty() ? "" : ", ") + std::to_string(counts[r]) + " " + std::string(kRoles[r].name);
  } else if (overlay_ == Overlay::kTensorSize) {
    const std::int64_t bytes = groupBytes(group);
    if (bytes > 0) out = "largest tensor " + formatBytes(bytes);
  } else if (overlay_ == Overlay::kFusionGroup || overlay_ == Overlay::kCompileTime) {
    const std::vector<int> ks = groupKernels(group);
    if (ks.empty()) return "no kernel";
    double ms = 0;
    int hits = 0;
    std::string names;
    for (size_t i = 0; i < ks.size(); ++i) {
      const InspectKernel& k = graph_.kernels()[static_cast<size_t>(ks[i])];
      ms += k.compileMs;
      hits += k.cacheHit ? 1 : 0;
      if (i < 4) names += (i ? ", " : "") + k.name;
    }
    if (ks.size() > 4) names += ", ...";
    out = std::to_string(ks.size()) + (ks.size() == 1 ? " kernel: " : " kernels: ") + names;
    if (overlay_ == Overlay::kCompileTime)
      out += "; compiled in " + formatMs(ms) + " (sum)" +
             (hits ? ", " + std::to_string(hits) + " from the disk cache" : std::string());
  }
  return out;
}

std::string OverlayPainter::nodeFill(int node) const {
  const InspectNode& n = graph_.node(node);
  switch (overlay_) {
    case Overlay::kOpKind: return std::string(opCategoryColour(n.category));
    case Overlay::kTensorSize: {
      const int s = sizeStep(n.tensorBytes);
      return std::string(s < 0 ? kNoValue : kSizeSteps[s]);
    }
    case Overlay::kPartition: return std::string(partitionRoleColour(n.partition));
    case Overlay::kDiff:
      return n.diff == DiffStatus::kNone ? std::string(opCategoryColour(n.category))
                                         : std::string(diffStatusColour(n.diff));
    case Overlay::kFusionGroup: return std::string(fusionFill(n.kernels.empty() ? -1 : n.kernels.front()));
    case Overlay::kCompileTime: return kernelTimeFill(n.kernels.empty() ? -1 : n.kernels.front());
  }
  return std::string(kNoValue);
}

std::string OverlayPainter::fill(const VisibleUnit& unit) const {
  if (unit.node >= 0) return nodeFill(unit.node);
  switch (overlay_) {
    case Overlay::kOpKind: return std::string(opCategoryColour(OpCategory::kGroup));
    case Overlay::kTensorSize: {
      const int s = sizeStep(groupBytes(unit.group));
      return std::string(s < 0 ? kNoValue : kSizeSteps[s]);
    }
    case Overlay::kPartition: return std::string(partitionRoleColour(groupRole(unit.group)));
    case Overlay::kDiff:
      return unit.diff == DiffStatus::kNone ? std::string(opCategoryColour(OpCategory::kGroup))
                                            : std::string(diffStatusColour(unit.diff));
    case Overlay::kFusionGroup: {
      const std::vector<int> ks = groupKernels(unit.group);
      if (ks.size() > 1) return std::string(kernelKey(KernelKey::kSeveralKernels).colour);
      return std::string(fusionFill(ks.empty() ? -1 : ks.front()));
    }
    case Overlay::kCompileTime: {
      // The group's kernels' compile times added up, on the same scale (a group is as dark as
      // its slowest kernel at least).
      const std::vector<int> ks = groupKernels(unit.group);
      if (ks.empty()) return std::string(kernelKey(KernelKey::kNoKernel).colour);
      double ms = 0;
      for (int k : ks) ms += graph_.kernels()[static_cast<size_t>(k)].compileMs;
      if (ms <= 0) return std::string(kernelKey(KernelKey::kCacheHit).colour);
      return std::string(kSizeSteps[std::max(0, logStep(ms))]);
    }
  }
  return std::string(kNoValue);
}

std::vector<LegendEntry> OverlayPainter::legend() const {
  std::vector<LegendEntry> out;
  switch (overlay_) {
    case Overlay::kOpKind:
      for (OpCategory c : allOpCategories())
        out.push_back({std::string(opCategoryName(c)), std::string(opCategoryColour(c))});
      break;
    case Overlay::kTensorSize: {
      const double span = maxLog_ - minLog_;
      for (int i = 0; i < kNumSizeSteps; ++i) {
        const auto at = [&](int k) {
          return static_cast<std::int64_t>(std::llround(std::exp2(minLog_ + span * k / kNumSizeSteps)));
        };
        out.push_back({formatBytes(at(i)) + " - " + formatBytes(at(i + 1)), std::string(kSizeSteps[i])});
      }
      out.push_back({"not a tensor", std::string(kNoValue)});
      break;
    }
    case Overlay::kPartition:
      for (const RoleInfo& r : kRoles)
        if (r.id != PartitionRole::kNone) out.push_back({std::string(r.name), std::string(r.colour)});
      break;
    case Overlay::kDiff:
      for (const DiffInfo& k : kDiffKeys) out.push_back({std::string(k.name), std::string(k.colour)});
      break;
    case Overlay::kFusionGroup: {
      const auto& ks = graph_.kernels();
      for (size_t i = 0; i < ks.size() && i < kNumFusionFills; ++i)
        out.push_back({ks[i].name, std::string(fusionFill(static_cast<int>(i)))});
      if (ks.size() > kNumFusionFills)
        out.push_back({"(" + std::to_string(ks.size() - kNumFusionFills) + " more kernels: colours repeat)", "#ffffff"});
      for (KernelKey k : {KernelKey::kSeveralKernels, KernelKey::kNoKernel})
        out.push_back({std::string(kernelKey(k).name), std::string(kernelKey(k).colour)});
      break;
    }
    case Overlay::kCompileTime: {
      const double span = maxLog_ - minLog_;
      const bool anyCompiled = std::any_of(graph_.kernels().begin(), graph_.kernels().end(),
                                           [](const InspectKernel& k) { return !k.cacheHit && k.compileMs > 0; });
      for (int i = 0; anyCompiled && i < kNumSizeSteps; ++i) {
        const auto at = [&](int k) { return std::exp2(minLog_ + span * k / kNumSizeSteps); };
        out.push_back({formatMs(at(i)) + " - " + formatMs(at(i + 1)), std::string(kSizeSteps[i])});
      }
      for (KernelKey k : {KernelKey::kCacheHit, KernelKey::kNoKernel})
        out.push_back({std::string(kernelKey(k).name), std::string(kernelKey(k).colour)});
      break;
    }
  }
  return out;
}

}  // namespace dynamo::gui
