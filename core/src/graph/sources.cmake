# The graph IR of dynamo::core: nodes, graphs, printer, serializer, FX conversion and runner.
# See README.md in this folder for the design.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/arg.cpp
  ${CMAKE_CURRENT_LIST_DIR}/node.cpp
  ${CMAKE_CURRENT_LIST_DIR}/target.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph.cpp
  ${CMAKE_CURRENT_LIST_DIR}/printer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/json_writer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/serializer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/python_value.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fx.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner.cpp)
