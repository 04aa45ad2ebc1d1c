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
# Files left out of ./test.sh's stack-2 run (label "stack2_slow" there): none today. The tools'
# end-to-end tests and the torchvision sweeps were here (about 20 of the 37 minutes of stack 2's
# whole suite on 2 cores) until the tools' Python children were forked from one server per file
# on stack 2 too (tests/python/pyfork.py: the server had compared each request with its
# environment after torch 2.x's imports, which set TORCHINDUCTOR_CACHE_DIR, so every request ran
# a fresh interpreter) and the torchvision sweeps ran a subset there (one classifier per family
# in eval mode; the rest skip with the reason, DYNAMO_STACK2_FULL=1 runs them): docs/stacks.md,
# "The slow files in stack 2's default run". A file added here needs its reason beside it.
set(DYNAMO_STACK2_SLOW "")

# Seconds each slow pytest file took in the last CI run on 2 cores (ctest's "Passed  N sec"; files
# under 15 s are left out). They are the tests' COST: on a clean clone, with no
# Testing/Temporary/CTestCostData.txt yet, ctest -j starts the costliest first, so that no long
# file starts last beside an idle core (docs/testing.md, "CI time"). A build tree that has run its
# tests once schedules by its own measured times instead. Approximate figures suffice: refresh them
# when a file's time changes a lot.
set(DYNAMO_PYTEST_COSTS_stack1
  test_torchvision=215 test_aot_torchvision=20 test_minify_cli=78 test_bench_smoke=57
  test_fused_dynamic=57 test_fused_ops=53 test_minify_kernel=50 test_dynamic_shape_reads=46
  test_minify_bisect=42 test_minify_accuracy=41 test_minify_errors=40 test_explain_cli=39
  test_fused_program_cache=39 test_minify_fused=33 test_adversarial_fused=32
  test_adversarial_fused_s6=47 test_adversarial_nested=18 test_adversarial_dynamic=15
  test_crash_trace=32
  test_logs=32 test_minify_aot=29 test_dynamic_model_code=28 test_minify_fork_server=27
  test_fused_graph_cache=25 test_dynamic_torchvision=23 test_kernel_recording=22
  test_fused_conv_dnnl=20 test_bytecode=16 test_fused_conv=16 test_minify_bisect_torchvision=16
  test_recording=15)
# Stack 2's figures for the files that left DYNAMO_STACK2_SLOW are seconds of CPU measured one file
# at a time (docs/stacks.md, "The slow files in stack 2's default run"); test_torchvision's is
# estimated from its eval sweep's rate there.
set(DYNAMO_PYTEST_COSTS_stack2
  test_torchvision=200 test_minify_cli=75 test_crash_trace=52 test_logs=28 test_explain_cli=22
  test_bench_smoke=129 test_fused_program_cache=112 test_minify_bisect=109 test_fused_dynamic=86
  test_fused_ops=60 test_fused_graph_cache=58 test_dynamic_shape_reads=57 test_adversarial_fused=53
  test_adversarial_fused_s6=65 test_adversarial_nested=25
  test_minify_fork_server=51 test_kernel_recording=50 test_torchvision_fused=46
  test_dynamic_model_code=40 test_fused_conv_dnnl=39 test_passes=33 test_fused_conv=32
  test_fused_training=32 test_minify_bisect_torchvision=32 test_bytecode=29
  test_adversarial_dynamic=28 test_fused_backend=28 test_fused_kernel_prelude=27
  test_explain_schemas=26 test_torchvision_families=23 test_trace_store=23
  test_explain_consistency=22 test_torch_modules=22 test_dynamic_shapes=21
  test_fused_dynamic_scalars=20 test_aot_decomp=19 test_fused_cuda=19 test_aot_training=18
  test_graph_ir=18 test_aot_trace_cli=17 test_aot_eager=16 test_snippet_corpus=15)

# Batches: groups of small pytest files that ./test.sh runs in one pytest process per group (the
# ctest entry py.batch.<group>, label "batch") instead of one process per file: a process's fixed
# cost (torch's import, pytest's start) is most of a small file's time (the 9 test_capture_* files
# on stack 1: 35.1 s of CPU as 9 processes, 12.0 s as one; docs/stacks.md, "CI time with a cold
# kernel cache"). The per-file entries stay, labelled "batched" besides, for `ctest -R`; ./test.sh
# with no arguments leaves them out (-LE batched), with arguments it leaves the batches out.
# A group is added here only after it passed as one process on both stacks (a file must not
# depend on a fresh process: dynamo config, compile listeners, patched torch).
set(DYNAMO_PYTEST_BATCHES capture small aot_fused adversarial misc)
set(DYNAMO_PYTEST_BATCH_capture
  test_capture_autocast test_capture_breaks test_capture_cases test_capture_clean_breaks
  test_capture_constructs test_capture_inference_mode test_capture_numpy test_capture_regressions
  test_capture_runtime)
set(DYNAMO_PYTEST_BATCH_small
  test_dynamic_symfloats test_dynamic_symints test_dynamic_transformer test_dynamic_shapes
  test_guards test_fewer_breaks test_explain_api test_listings test_graph_ir test_fused_golden
  test_fused_inplace test_fused_conv_weight_writes)
set(DYNAMO_PYTEST_BATCH_COSTS_stack1 capture=12 small=24 aot_fused=28 adversarial=17 misc=32)
set(DYNAMO_PYTEST_BATCH_COSTS_stack2 capture=23 small=46 aot_fused=46 adversarial=39 misc=135)
set(DYNAMO_PYTEST_BATCH_aot_fused
  test_aot_eager test_aot_decomp test_aot_training test_backends test_profile_api
  test_testing_module test_fused_pool_arena test_fused_stream_stores test_fused_matmul test_docs)
# The small adversarial files (eager backend; each case resets dynamo before and after it, and the
# harness reseeds random, numpy and torch before every build and call: adversarial_harness.py).
set(DYNAMO_PYTEST_BATCH_adversarial
  test_adversarial_aliasing test_adversarial_breaks test_adversarial_calls
  test_adversarial_containers test_adversarial_datadep test_adversarial_exceptions
  test_adversarial_models test_adversarial_monkeypatch test_adversarial_numpy
  test_adversarial_realmodels test_adversarial_realmodels_loops test_adversarial_round3
  test_adversarial_round4 test_adversarial_s7 test_adversarial_training)
# Small files of several components that restore what they change (monkeypatch.setenv, config in a
# finally).
set(DYNAMO_PYTEST_BATCH_misc
  test_aot_fake_trace test_aot_per_size_cli test_hardening test_torchvision_fused
  test_explain_schemas test_explain_consistency test_snippet_corpus test_torch_modules)

# OpenMP threads (torch's intra-op pool, the fused backend's `#pragma omp parallel` kernels) wait
# by sleeping, not spinning: ctest -j2 runs two torch processes of 2 threads each on CI's 2 cores,
# and libgomp's default spin-wait burned the other test's core (test_fused_dynamic on stack 2: 117 s
# of CPU with the default, 27 s with PASSIVE; docs/stacks.md, "CI time"). The kernels still run
# their parallel regions on every thread: only the idle wait changes.
set(DYNAMO_TEST_OMP_ENV "OMP_WAIT_POLICY=PASSIVE")

# dynamo_add_catch_test(NAME name SOURCES a.cpp ... LIBS dynamo::x ...)
# One executable, one ctest entry (label "unit").
function(dynamo_add_catch_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE dynamo_catch_main dynamo_warnings ${T_LIBS})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "unit;${DYNAMO_STACK_LABEL}"
    ENVIRONMENT "${DYNAMO_TEST_OMP_ENV}")
endfunction()

# The environment of every pytest entry: the build tree's package first on the path.
set(DYNAMO_PYTEST_ENV
  "PYTHONPATH=${DYNAMO_PY_BUILD_DIR};DYNAMO_BUILD_DIR=${CMAKE_BINARY_DIR};DYNAMO_SOURCE_DIR=${CMAKE_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1;${DYNAMO_TEST_OMP_ENV}")

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
  set(_labels "python;${_stack}")
  foreach(_group IN LISTS DYNAMO_PYTEST_BATCHES)
    if(_name IN_LIST DYNAMO_PYTEST_BATCH_${_group})
      list(APPEND _labels batched)
    endif()
  endforeach()
  set_tests_properties(${_test} PROPERTIES LABELS "${_labels}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "${DYNAMO_PYTEST_ENV}")
  foreach(_entry IN LISTS DYNAMO_PYTEST_COSTS_${DYNAMO_STACK_LABEL})
    if(_entry MATCHES "^${_name}=([0-9]+)$")
      set_tests_properties(${_test} PROPERTIES COST ${CMAKE_MATCH_1})
    endif()
  endforeach()
endfunction()

# dynamo_add_pytest_batches(dir): the entry py.batch.<group> of each group of DYNAMO_PYTEST_BATCHES,
# one pytest process over the group's files in dir (labels python, batch and the stack's).
function(dynamo_add_pytest_batches dir)
  foreach(_group IN LISTS DYNAMO_PYTEST_BATCHES)
    set(_files "")
    foreach(_name IN LISTS DYNAMO_PYTEST_BATCH_${_group})
      if(NOT EXISTS ${dir}/${_name}.py)
        message(FATAL_ERROR "pytest batch '${_group}': ${dir}/${_name}.py does not exist")
      endif()
      list(APPEND _files ${dir}/${_name}.py)
    endforeach()
    add_test(NAME py.batch.${_group}
      COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${_files}
      WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(py.batch.${_group} PROPERTIES LABELS "python;batch;${DYNAMO_STACK_LABEL}"
      TIMEOUT 600 ENVIRONMENT "${DYNAMO_PYTEST_ENV}")
    # A batch's cost (seconds of CPU the group took as one process, h-ci's figures) so that a clean
    # clone's longest-first schedule does not start it last.
    foreach(_entry IN LISTS DYNAMO_PYTEST_BATCH_COSTS_${DYNAMO_STACK_LABEL})
      if(_entry MATCHES "^${_group}=([0-9]+)$")
        set_tests_properties(py.batch.${_group} PROPERTIES COST ${CMAKE_MATCH_1})
      endif()
    endforeach()
  endforeach()
endfunction()
