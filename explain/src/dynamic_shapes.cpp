// parseDynamicShapes: a compile's "dynamo.dynamic_shapes" artifact as data (explain_report.h).
// The artifact is the compiler's text (core/src/interp/compiler.cpp dynamicText: the notes of
// dynamic.cpp and sym_values.cpp, then ShapeEnv::describe), one fact per line:
//
//   x.size()[0] is dynamic (s0): automatic dynamic: the size changed (8 -> 16)    a symbol
//   lr is dynamic (float): automatic dynamic: the value changed (0.1 -> 0.2)      a float input
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
  static const std::regex kDynamic(R"(^(.+) is dynamic \((s\d+|float)\): (.*)$)");
  static const std::regex kRange(R"(^(s\d+) = .+ in (\[[^\]]*\]) \(dynamic; example -?\d+\)$)");
  static const std::regex kSpecialised(R"(^(.+) specialised to [^:]+: .*$)");
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
    } else if (std::regex_match(line, m, kSpecialised)) {
      out.specialised.push_back(line);
      // A float input then needed as a value: listed as specialised only.
      std::string source = m[1].str();
      out.dynamic.erase(std::remove_if(out.dynamic.begin(), out.dynamic.end(),
                                       [&](const DynamicDim& d) { return d.symbol == "float" && d.source == source; }),
                        out.dynamic.end());
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
  // (A float has no symbol nor range: "float".)
  out.dynamic.erase(std::remove_if(out.dynamic.begin(), out.dynamic.end(),
                                   [](const DynamicDim& d) { return d.range.empty() && d.symbol != "float"; }),
                    out.dynamic.end());
  return out;
}

}  // namespace dynamo::explain
