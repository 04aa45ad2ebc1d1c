# Where the `dynamo` package is installed, and how the extension module is built.
#
# DYNAMO_PY_INSTALL_DIR: the interpreter's platlib (on Debian, /usr/local/lib/python3.X/dist-packages
# for /usr/bin/python3; in a virtual environment, its site-packages), so that
# `python3 -c "import dynamo"` works from any directory after `cmake --install`.
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c "import sysconfig; print(sysconfig.get_path('platlib'))"
  OUTPUT_VARIABLE _dynamo_platlib OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _dynamo_platlib_rc)
if(NOT _dynamo_platlib_rc EQUAL 0 OR _dynamo_platlib STREQUAL "")
  message(FATAL_ERROR "Could not ask ${Python3_EXECUTABLE} for its platlib directory")
endif()
set(DYNAMO_PY_INSTALL_DIR "${_dynamo_platlib}" CACHE PATH "Where the dynamo Python package is installed")

# The package is assembled in the build tree too, so tests import the fresh build:
#   ${DYNAMO_PY_BUILD_DIR}/dynamo/{*.py,_C*.so}
set(DYNAMO_PY_BUILD_DIR "${CMAKE_BINARY_DIR}/python")
