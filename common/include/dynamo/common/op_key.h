// The name an op counts under in every report: the core's Graph::opCounts (and so
// dynamo.explain() and the logs), dynamo-explain, dynamo-profile and the inspector, which count
// the serialized graph. One definition, so the same script gives the same op names everywhere.
#pragma once

#include <string>
#include <string_view>

namespace dynamo {

/// The key of a node that calls something: a call_function's qualified target ("torch.add",
/// "torch.ops.aten.add.Tensor"), "torch.Tensor.<method>" for a call_method ("torch.Tensor.sum"),
/// "module <name>" for a call_module; other ops count under their op name.
inline std::string graphOpKey(std::string_view op, std::string_view target) {
  if (op == "call_function") return std::string(target);
  if (op == "call_method") return "torch.Tensor." + std::string(target);
  if (op == "call_module") return "module " + std::string(target);
  return std::string(op);
}

}  // namespace dynamo
