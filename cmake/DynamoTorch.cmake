# dynamo::torch: torch's C++ headers and libraries, as the chosen interpreter's torch has them.
#
# We ask the interpreter (torch.utils.cpp_extension) instead of find_package(Torch), so the same
# code finds Debian's /usr/lib/python3/dist-packages/torch and a virtual environment's torch alike,
# with the matching C++ ABI. Only the few translation units that read tensor internals link it;
# keep torch headers out of every widely included header.
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
    "import torch, torch.utils.cpp_extension as c; print(','.join(c.include_paths())); print(','.join(c.library_paths())); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
  OUTPUT_VARIABLE _dynamo_torch_out ERROR_VARIABLE _dynamo_torch_err
  RESULT_VARIABLE _dynamo_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _dynamo_torch_rc EQUAL 0)
  message(FATAL_ERROR "${Python3_EXECUTABLE} cannot import torch: ${_dynamo_torch_err}\n"
    "Install Debian's python3-torch (setup.sh does) or pass -DPython3_EXECUTABLE=<python with torch>.")
endif()
string(REPLACE "\n" ";" _dynamo_torch_lines "${_dynamo_torch_out}")
list(GET _dynamo_torch_lines 0 _inc)
list(GET _dynamo_torch_lines 1 _lib)
list(GET _dynamo_torch_lines 2 DYNAMO_TORCH_CXX11_ABI)
list(GET _dynamo_torch_lines 3 DYNAMO_TORCH_VERSION)
string(REPLACE "," ";" DYNAMO_TORCH_INCLUDE_DIRS "${_inc}")
string(REPLACE "," ";" DYNAMO_TORCH_LIBRARY_DIRS "${_lib}")
message(STATUS "torch ${DYNAMO_TORCH_VERSION}: headers ${DYNAMO_TORCH_INCLUDE_DIRS}")

set(_dynamo_torch_libs)
foreach(name c10 torch_python)
  find_library(DYNAMO_TORCH_LIB_${name} ${name} PATHS ${DYNAMO_TORCH_LIBRARY_DIRS} NO_DEFAULT_PATH)
  if(NOT DYNAMO_TORCH_LIB_${name})
    find_library(DYNAMO_TORCH_LIB_${name} ${name})
  endif()
  if(NOT DYNAMO_TORCH_LIB_${name})
    message(FATAL_ERROR "lib${name} not found in ${DYNAMO_TORCH_LIBRARY_DIRS}")
  endif()
  list(APPEND _dynamo_torch_libs ${DYNAMO_TORCH_LIB_${name}})
endforeach()

add_library(dynamo_torch INTERFACE)
add_library(dynamo::torch ALIAS dynamo_torch)
target_include_directories(dynamo_torch SYSTEM INTERFACE ${DYNAMO_TORCH_INCLUDE_DIRS})
target_compile_definitions(dynamo_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${DYNAMO_TORCH_CXX11_ABI})
target_link_libraries(dynamo_torch INTERFACE ${_dynamo_torch_libs})
