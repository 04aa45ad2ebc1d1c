#!/bin/sh
# A kernel compiler with a bug in one fusion pattern, for py.test_minify_cli (DYNAMO_CXX=this):
# a generated kernel whose loop body calls dyn_tanh( does not compile; every other kernel is
# compiled by the real c++.
for a in "$@"; do
  case "$a" in
    *.cpp) if grep -q "dyn_tanh(((" "$a"; then
             echo "fake-cxx: internal compiler error: tanh inside a fused loop" >&2; exit 1
           fi ;;
  esac
done
exec c++ "$@"
