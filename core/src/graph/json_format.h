// Shared by the graph serializer and reader (serializer.cpp, reader.cpp): the JSON type and the
// spelling of the format. Private to core/src/graph.
#pragma once

#include <nlohmann/json.hpp>

namespace dynamo::core {

/// Objects keep their keys in insertion (and file) order, so written text is stable and
/// kwargs keep their call order.
using Json = nlohmann::ordered_json;

/// The "format" member of every serialized graph.
constexpr const char kGraphFormatName[] = "dynamo.graph";

}  // namespace dynamo::core
