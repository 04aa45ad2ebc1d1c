# Test helpers: Catch2 unit tests (Catch2 2.13 on Debian 12, Catch2 3 on the GPU machine) and
# pytest files, all registered with ctest.
find_package(Catch2 REQUIRED)
add_library(dynamo_catch_main STATIC ${CMAKE_SOURCE_DIR}/tests/catch_main.cpp)
if(Catch2_VERSION VERSION_LESS 3)
  target_link_libraries(dynamo_catch_main PUBLIC Catch2::Catch2)
  target_compile_definitions(dynamo_catch_main PUBLIC DYNAMO_CATCH2_V2=1)
else()
  target_link_libraries(dynamo_catch_main PUBLIC Catch2::Catch2WithMain)
endif()
target_include_directories(dynamo_catch_main PUBLIC ${CMAKE_SOURCE_DIR}/tests)

# dynamo_add_catch_test(NAME name SOURCES a.cpp ... LIBS dynamo::x ...)
# One executable, one ctest entry (label "unit").
function(dynamo_add_catch_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE dynamo_catch_main dynamo_warnings ${T_LIBS})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES LABELS unit)
endfunction()

# dynamo_add_pytest(path/to/test_x.py [TIMEOUT s]): one ctest entry per pytest file, run with the
# build tree's package first on the path.
function(dynamo_add_pytest file)
  cmake_parse_arguments(T "" "TIMEOUT" "" ${ARGN})
  get_filename_component(_name ${file} NAME_WE)
  set(_test py.${_name})
  add_test(NAME ${_test}
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/${file}
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${_test} PROPERTIES LABELS python TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "PYTHONPATH=${DYNAMO_PY_BUILD_DIR};DYNAMO_BUILD_DIR=${CMAKE_BINARY_DIR};DYNAMO_SOURCE_DIR=${CMAKE_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")
endfunction()
