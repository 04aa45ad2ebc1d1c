// A toy evaluator for partitioner tests: runs a graph of a few ATen ops on scalar doubles (every
// tensor is one double), so forward + backward can be checked against the joint graph without
// Python or LibTorch. aten::bernoulli.p stands for a random op: each call draws the next value of
// a counter-driven sequence, so running it twice (recomputing it) gives a different result.
#pragma once

#include <cmath>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "dynamo/core/graph.h"

namespace toy {

using Value = std::optional<double>;  ///< nullopt is None

/// The random op's state: reset it before a run that must reproduce another one's draws.
inline int& randomCounter() {
  static int counter = 0;
  return counter;
}

inline double applyOp(const std::string& schema, const std::vector<double>& a) {
  if (schema == "aten::mul.Tensor") return a.at(0) * a.at(1);
  if (schema == "aten::add.Tensor") return a.at(0) + a.at(1);
  if (schema == "aten::relu") return a.at(0) > 0 ? a.at(0) : 0;
  if (schema == "aten::neg") return -a.at(0);
  if (schema == "aten::sum") return a.at(0) * 0.5;
  if (schema == "aten::mm") return a.at(0) * a.at(1) + 1;
  if (schema == "aten::threshold_backward") return a.at(1) > 0 ? a.at(0) : 0;
  if (schema == "aten::bernoulli.p") return a.at(0) * ((randomCounter()++ * 37) % 11) / 10.0;
  throw std::runtime_error("toy evaluator: no op " + schema);
}

/// Runs g on inputs; returns the output tuple's items.
inline std::vector<Value> run(const dynamo::core::Graph& g, const std::vector<double>& inputs) {
  using dynamo::core::Arg;
  std::unordered_map<const dynamo::core::Node*, double> env;
  if (inputs.size() != g.inputs().size()) throw std::runtime_error("toy evaluator: wrong input count");
  for (size_t i = 0; i < inputs.size(); ++i) env[g.inputs()[i].get()] = inputs[i];
  for (const dynamo::core::NodeRef& n : g.body()) {
    std::vector<double> args;
    for (const Arg& a : n->args()) {
      if (a.isNode()) args.push_back(env.at(a.asNode().get()));
      else if (a.kind() == dynamo::core::ArgKind::kFloat) args.push_back(a.asFloat());
      else if (a.kind() == dynamo::core::ArgKind::kInt) args.push_back(static_cast<double>(a.asInt()));
    }
    env[n.get()] = applyOp(n->target().schemaName(), args);
  }
  std::vector<Value> out;
  for (const Arg& a : g.output()->outputValue().items()) {
    if (a.isNode()) out.emplace_back(env.at(a.asNode().get()));
    else out.emplace_back(std::nullopt);
  }
  return out;
}

}  // namespace toy
