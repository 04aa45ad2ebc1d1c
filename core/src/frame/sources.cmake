target_sources(dynamo_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/placeholder.cpp)
