# The symbolic interpreter, code generation and the frame compiler.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/value.cpp
  ${CMAKE_CURRENT_LIST_DIR}/torch_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/context.cpp
  ${CMAKE_CURRENT_LIST_DIR}/example_memo.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dynamic.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sym_values.cpp
  ${CMAKE_CURRENT_LIST_DIR}/size_rules.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tracer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tracer_attrs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tracer_calls.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tracer_handlers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/call_constructs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/call_sets.cpp
  ${CMAKE_CURRENT_LIST_DIR}/call_lazy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/autocast.cpp
  ${CMAKE_CURRENT_LIST_DIR}/inference_mode.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph_call.cpp
  ${CMAKE_CURRENT_LIST_DIR}/codegen.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compiler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compile_sink.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backend_kernels.cpp)
