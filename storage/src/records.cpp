// Small helpers of records.h: the clock and the code kinds of code_kinds.def.
#include "dynamo/storage/records.h"

#include <chrono>

namespace dynamo::storage {

std::int64_t nowMicros() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {
struct CodeKindInfo {
  CodeKind kind;
  std::string_view name;
  std::string_view language;
};
constexpr CodeKindInfo kCodeKinds[] = {
#define DYNAMO_CODE_KIND(id, name, language, description) {CodeKind::id, name, language},
#include "dynamo/storage/code_kinds.def"
#undef DYNAMO_CODE_KIND
};
}  // namespace

std::string_view codeKindName(CodeKind kind) { return kCodeKinds[static_cast<int>(kind)].name; }

std::string_view codeKindLanguage(CodeKind kind) {
  return kCodeKinds[static_cast<int>(kind)].language;
}

std::optional<CodeKind> codeKindFromName(std::string_view name) {
  for (const CodeKindInfo& info : kCodeKinds)
    if (info.name == name) return info.kind;
  return std::nullopt;
}

const std::vector<CodeKind>& allCodeKinds() {
  static const std::vector<CodeKind> kinds = [] {
    std::vector<CodeKind> v;
    for (const CodeKindInfo& info : kCodeKinds) v.push_back(info.kind);
    return v;
  }();
  return kinds;
}

}  // namespace dynamo::storage
