// parseDynamicShapes: a compile's "dynamo.dynamic_shapes" artifact as data (explain_report.h).
// The artifact is the compiler's text (core/src/interp/compiler.cpp dynamicText: the notes of
// dynamic.cpp and sym_values.cpp, then ShapeEnv::describe), one fact per line:
//
//   x.size()[0] is dynamic (s0): automatic dynamic: the size changed (8 -> 16)    a symbol
//   s0 = x.size()[0] in [2, inf] (dynamic; example 16)                            its range
//     y.size()[0] == x.size()[0] (duck sizing: equal at the first compile)      a guard
//   x.size()[1] specialised to 6: x.shape read as Python ints at m.py:5           a specialisation
//   x.size()[1] == 6  # specialised: x.shape read as Python ints at m.py:5        (its guard: skipped)
//   Mod(n, 3) == 0  # comparison at m.py:7                                        a guard
//   every size is static: backend 'aot_eager' specialises ...                     a note
#include <algorithm>
#include <regex>

#include "dynamo/explain/explain_report.h"

namespace dynamo::explain {

DynamicShapes parseDynamicShapes(const std::string& text) {
  static const std::regex kDynamic(R"(^(.+) is dynamic \((s\d+)\): (.*)$)");
  static const std::regex kRange(R"(^(s\d+) = .+ in (\[[^\]]*\]) \(dynamic; example -?\d+\)$)");
  static const std::regex kSpecialised(R"(^.+ specialised to -?\d+: .*$)");
  DynamicShapes out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    std::smatch m;
    if (std::regex_match(line, m, kDynamic)) {
      out.dynamic.push_back({m[1].str(), m[2].str(), "", m[3].str()});
    } else if (std::regex_match(line, m, kRange)) {
      for (DynamicDim& d : out.dynamic)
        if (d.symbol == m[1].str()) d.range = m[2].str();
    } else if (std::regex_match(line, kSpecialised)) {
      out.specialised.push_back(line);
    } else if (line.find("  # specialised: ") != std::string::npos) {
      continue;  // the guard of a specialisation listed above
    } else if (line.rfind("  ", 0) == 0) {
      out.guards.push_back(line.substr(2));
    } else if (line.find("  # ") != std::string::npos) {
      out.guards.push_back(line);
    } else {
      out.notes.push_back(line);
    }
  }
  // A symbol that was then specialised has no range line: it is listed as specialised only.
  out.dynamic.erase(std::remove_if(out.dynamic.begin(), out.dynamic.end(), [](const DynamicDim& d) { return d.range.empty(); }),
                    out.dynamic.end());
  return out;
}

}  // namespace dynamo::explain
