#!/bin/bash
# Runs the storage test "the WAL stays bounded" N times in parallel (default 8) and prints each
# run's WAL size and result: the check of docs/trace-store.md ("Checkpoints") under load.
#   scripts/wal_parallel.sh [N] [BUILD_DIR]
set -u
n=${1:-8}
build=${2:-build}
bin="$build/tests/storage/storage_tests"
[ -x "$bin" ] || { echo "error: $bin not found; build first (cmake --build $build)" >&2; exit 2; }
name="the WAL stays bounded: the writer thread checkpoints while flushes commit"
out=$(mktemp -d)
for i in $(seq "$n"); do
  "$bin" -s "$name" > "$out/$i.log" 2>&1 &
done
wait
fails=0
for i in $(seq "$n"); do
  size=$(grep -o 'WAL file: [0-9]* bytes' "$out/$i.log" | head -1)
  if grep -q "All tests passed" "$out/$i.log"; then echo "run $i: passed, $size"; else echo "run $i: FAILED, $size"; fails=$((fails + 1)); fi
done
rm -rf "$out"
echo "$((n - fails)) of $n passed"
[ "$fails" -eq 0 ]
