#!/usr/bin/env bash
# Builds kvq and runs every test: a gcc build with warnings as errors, and a subset of its tests
# under valgrind; the unit and conformance tests under ThreadSanitizer; then the whole suite
# under AddressSanitizer and UndefinedBehaviorSanitizer (clang, which also builds the fuzz
# targets and runs each for a bounded time). Then the reliability stages' summary lines
# (scripts/reliability.sh --summary), and last ctest's summary of that run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"
echo "== gcc, -Werror"
CC=gcc cmake -S . -B build-gcc -DCMAKE_BUILD_TYPE=Release -DKVQ_WERROR=ON -DKVQ_BUILD_TESTS=ON >/dev/null
cmake --build build-gcc -j"$jobs" >/dev/null
echo "== valgrind (a subset of the gcc build's tests)"
bash scripts/valgrind.sh build-gcc
echo "== clang, ThreadSanitizer (unit and conformance tests)"
CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Tsan -DKVQ_WERROR=ON -DKVQ_BUILD_TESTS=ON \
    >/dev/null
cmake --build build-tsan -j"$jobs" >/dev/null
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan -L 'unit|conformance' -j"$jobs" --output-on-failure >build-tsan/ctest.log 2>&1 ||
    { cat build-tsan/ctest.log; echo "ThreadSanitizer run failed"; exit 1; }
tail -n 3 build-tsan/ctest.log
echo "== clang, AddressSanitizer + UndefinedBehaviorSanitizer"
CC=clang cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Sanitize -DKVQ_WERROR=ON -DKVQ_BUILD_TESTS=ON \
    -DKVQ_FUZZ=ON >/dev/null
cmake --build build-san -j"$jobs" >/dev/null
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
ctest --test-dir build-san --output-on-failure -j"$jobs" >build-san/ctest.log 2>&1 || status=$?
sed -n '/tests passed/q;p' build-san/ctest.log
# Sanitizer reports halt the test that made them; count any that a test printed anyway.
reports="$({ grep -hcE 'ERROR: (Address|Leak)Sanitizer|runtime error:|WARNING: ThreadSanitizer' \
    build-san/Testing/Temporary/LastTest.log build-tsan/Testing/Temporary/LastTest.log || true; } |
    awk '{s += $1} END {print s + 0}')"
bash scripts/reliability.sh --summary build-san/Testing/Temporary/LastTest.log
echo "sanitizers: reports=$reports"
echo "== ctest (AddressSanitizer + UndefinedBehaviorSanitizer)"
sed -n '/tests passed/,$p' build-san/ctest.log
exit "$status"
