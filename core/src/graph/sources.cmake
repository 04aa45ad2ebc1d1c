# The graph IR of dynamo::core: nodes, graphs, printer, serializer, FX conversion and runner.
# See README.md in this folder for the design.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/arg.cpp
  ${CMAKE_CURRENT_LIST_DIR}/node.cpp
  ${CMAKE_CURRENT_LIST_DIR}/target.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_meta.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph.cpp
  ${CMAKE_CURRENT_LIST_DIR}/printer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/serializer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/resolve.cpp
  ${CMAKE_CURRENT_LIST_DIR}/python_value.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fx.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner.cpp)
# JSON on nlohmann::json (Debian's nlohmann-json3-dev, header-only), private to the graph code.
find_package(nlohmann_json 3.10 REQUIRED)
target_link_libraries(dynamo_core PRIVATE nlohmann_json::nlohmann_json)
