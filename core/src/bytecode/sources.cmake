# The bytecode toolkit (decode / build / verify / assemble / print code objects). See README.md.
target_sources(dynamo_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/opcode_tables.c
  ${CMAKE_CURRENT_LIST_DIR}/opcodes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decode.cpp
  ${CMAKE_CURRENT_LIST_DIR}/builder.cpp
  ${CMAKE_CURRENT_LIST_DIR}/analysis.cpp
  ${CMAKE_CURRENT_LIST_DIR}/handlers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/assemble.cpp
  ${CMAKE_CURRENT_LIST_DIR}/printer.cpp)
