# Sources and guards (core/src/guards). tensor_guards.cpp is the only file that includes torch:
# it is compiled in its own object library so that only it gets torch's include paths, and
# dynamo_core links torch's libraries (c10, torch_python) privately: they reach the final link of
# whatever links dynamo_core, but torch's headers reach no other file.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/source.cpp
  ${CMAKE_CURRENT_LIST_DIR}/module_attr.cpp
  ${CMAKE_CURRENT_LIST_DIR}/py_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/leaf_guards.cpp
  ${CMAKE_CURRENT_LIST_DIR}/guard_set.cpp)

add_library(dynamo_guards_torch OBJECT ${CMAKE_CURRENT_LIST_DIR}/tensor_guards.cpp)
target_include_directories(dynamo_guards_torch PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(dynamo_guards_torch PRIVATE
  dynamo::common Python3::Module dynamo::torch dynamo_warnings)
target_sources(dynamo_core PRIVATE $<TARGET_OBJECTS:dynamo_guards_torch>)
target_link_libraries(dynamo_core PRIVATE dynamo::torch)
