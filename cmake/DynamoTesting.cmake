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

# Which supported stack this tree is built for (docs/stacks.md): stack 1 is Debian's Python 3.11 +
# torch 1.13 (build/), stack 2 pyenv's Python 3.12 + torch 2.x from PyPI (build-py312/, made by
# scripts/lib.sh's dynamo_build_stack2). Unit and pytest entries carry their stack's label; on
# stack 2 the files of DYNAMO_STACK2_SLOW carry "stack2_slow" instead, so that ./test.sh's
# `-L ^stack2$` runs the documented subset (ctest -L stack2 in build-py312 runs them all).
if(Python3_VERSION VERSION_GREATER_EQUAL 3.12)
  set(DYNAMO_STACK2 ON)
  set(DYNAMO_STACK_LABEL stack2)
else()
  set(DYNAMO_STACK2 OFF)
  set(DYNAMO_STACK_LABEL stack1)
endif()
# The tools' end-to-end tests (each starts many processes, and torch 2.x takes longer to import)
# and the torchvision sweeps: about 20 of the 37 minutes of stack 2's whole suite on 2 cores
# (docs/stacks.md). Labelled stack2_slow: left out of ./test.sh's stack-2 run.
# (test_minify_bisect and test_minify_bisect_torchvision left the list when dynamo-bisect came down
# to one torch import per bisection: docs/bisect.md, "The runs: a fork server".)
set(DYNAMO_STACK2_SLOW
  test_explain_cli test_logs test_minify_cli test_minify_errors test_crash_trace
  test_recording test_profile_cli test_minify_accuracy test_minify_fused test_minify_aot
  test_minify_kernel
  test_torchvision test_aot_torchvision test_dynamic_torchvision)

# dynamo_add_catch_test(NAME name SOURCES a.cpp ... LIBS dynamo::x ...)
# One executable, one ctest entry (label "unit").
function(dynamo_add_catch_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE dynamo_catch_main dynamo_warnings ${T_LIBS})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "unit;${DYNAMO_STACK_LABEL}")
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
  set(_stack ${DYNAMO_STACK_LABEL})
  if(DYNAMO_STACK2 AND _name IN_LIST DYNAMO_STACK2_SLOW)
    set(_stack stack2_slow)
  endif()
  set_tests_properties(${_test} PROPERTIES LABELS "python;${_stack}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "PYTHONPATH=${DYNAMO_PY_BUILD_DIR};DYNAMO_BUILD_DIR=${CMAKE_BINARY_DIR};DYNAMO_SOURCE_DIR=${CMAKE_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")
endfunction()
