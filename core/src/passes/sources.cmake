# The pass pipeline of dynamo::core (passes.def): the pipeline, the rewriter and one file per pass.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/pipeline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rewriter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dead_code_elimination.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_corrupt_node.cpp)
