# The PEP 523 frame hook and its per-code caches (see README.md).
#   C   : everything that touches CPython's internal frame layout (C++ cannot include
#         internal/pycore_pystate.h and friends).
#   C++ : modes, caches, guards and the FrameCompiler interface.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cpython_internals.c
  ${CMAKE_CURRENT_LIST_DIR}/eval_frame.c
  ${CMAKE_CURRENT_LIST_DIR}/code_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/frame_hook.cpp
  ${CMAKE_CURRENT_LIST_DIR}/frame_view.cpp)
