# The symbolic integer engine (dynamic shapes): canonical expressions, arithmetic, ranges and the
# shape environment of one compile. No Python, no torch: unit-tested on its own.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/expr.cpp
  ${CMAKE_CURRENT_LIST_DIR}/arith.cpp
  ${CMAKE_CURRENT_LIST_DIR}/range.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shape_env.cpp
  ${CMAKE_CURRENT_LIST_DIR}/flat_check.cpp)
