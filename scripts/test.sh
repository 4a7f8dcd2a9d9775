#!/usr/bin/env bash
# Builds kvq and runs every test: a gcc build with warnings as errors, and a subset of its tests
# under valgrind; the unit and conformance tests (and those labelled tsan: a log-store crash
# campaign) under ThreadSanitizer; the whole suite under
# AddressSanitizer and UndefinedBehaviorSanitizer (clang, which also builds the fuzz targets and
# runs each for a bounded time). Then the reliability stages' summary lines
# (scripts/reliability.sh --summary), each stage's time, and last ctest's summary of the
# AddressSanitizer run.
#
# Time (docs/RELIABILITY.md, "The test command's time"): the three builds are kept in build-gcc,
# build-tsan and build-san and only brought up to date when they exist; they are made one after
# another (each uses every core). The test stages then run side by side in two lanes, the
# AddressSanitizer suite in one, ThreadSanitizer, valgrind and the full-size campaigns in the
# other: much of a test's time is spent waiting (syncs, kills, sleeps, watches), which the other
# lane fills. The ThreadSanitizer lane leaves out the campaigns whose processes run no second
# thread (tsan_skip below): ThreadSanitizer can find nothing there that AddressSanitizer's run
# of the same campaign, at its full size, does not. The sanitizer builds run the costliest
# count-driven campaigns at a reduced size (tests/CMakeLists.txt, label fullsize); the gcc
# Release build runs them at their full size after valgrind, several times cheaper.
#
#   scripts/test.sh            KVQ_TEST_LANES=1 runs the lanes one after the other
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"
start=$SECONDS
timings=""

# timed NAME COMMAND...: runs the command, prints how long it took and keeps it for the end.
timed() {
    local name="$1" t0=$SECONDS rc=0
    shift
    "$@" || rc=$?
    echo "-- $name: $((SECONDS - t0)) s"
    timings="$timings$name $((SECONDS - t0))"$'\n'
    return "$rc"
}

# build DIR CC TYPE [CMAKE OPTION...]: configures (cheap when configured) and builds.
build() {
    local dir="$1" cc="$2" type="$3"
    shift 3
    CC="$cc" cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DKVQ_WERROR=ON \
        -DKVQ_BUILD_TESTS=ON "$@" >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null
}

# The campaigns ThreadSanitizer adds nothing to: none of their processes (the test's own, the
# children it kills, stops, opens damaged files in or runs under strace) creates a thread, and
# none installs a signal handler; scripts/tests/tsan_skip_check.sh shows it. They still run, at
# their full size, in the AddressSanitizer lane.
tsan_skip=(test_emb_cq test_emb_damage test_emb_pause test_emb_storage_faults test_emb_sync_order)
TSAN_SKIP="^unit\.($(IFS='|'; echo "${tsan_skip[*]}"))\$"

# A lane's stages write their time and exit status beside their log.
run_stage() {
    local out="$1" t0=$SECONDS rc=0
    shift
    "$@" >"$out.log" 2>&1 || rc=$?
    echo "$((SECONDS - t0))" >"$out.time"
    echo "$rc" >"$out.rc"
}

tsan_tests() {
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        ctest --test-dir build-tsan -L 'unit|conformance|tsan' -E "$TSAN_SKIP" -j"$jobs" \
        --output-on-failure
}

san_tests() {
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-san --output-on-failure -j"$jobs"
}

# The campaigns the sanitizer builds run smaller, at their full size (label fullsize).
release_tests() {
    ctest --test-dir build-gcc -L fullsize -j"$jobs" --output-on-failure
}

tsan_lane() {
    run_stage build-tsan/ctest tsan_tests
    run_stage build-gcc/valgrind bash scripts/valgrind.sh build-gcc
    run_stage build-gcc/ctest release_tests
}

san_lane() {
    run_stage build-san/ctest san_tests
}

echo "== builds: gcc -Werror (build-gcc), clang ThreadSanitizer (build-tsan), clang ASan + UBSan" \
    "with the fuzz targets (build-san)"
timed "build gcc" build build-gcc gcc Release
timed "build tsan" build build-tsan clang Tsan -DKVQ_BUILD_BENCH=OFF
timed "build asan+ubsan" build build-san clang Sanitize -DKVQ_FUZZ=ON

echo "== tests: ASan + UBSan (the whole suite) beside ThreadSanitizer (unit and conformance)," \
    "then valgrind (a subset of the gcc build's tests), then the full-size campaigns (gcc)"
t0=$SECONDS
if [ "${KVQ_TEST_LANES:-2}" = 1 ]; then
    tsan_lane
    san_lane
else
    tsan_lane &
    san_lane &
    wait
fi
timings="${timings}tests, both lanes $((SECONDS - t0))"$'\n'
timings="${timings}  threadsanitizer $(cat build-tsan/ctest.time)"$'\n'
timings="${timings}  then valgrind $(cat build-gcc/valgrind.time)"$'\n'
timings="${timings}  then full-size (gcc) $(cat build-gcc/ctest.time)"$'\n'
timings="${timings}  asan+ubsan $(cat build-san/ctest.time)"$'\n'
status=0
echo "== valgrind"
cat build-gcc/valgrind.log
[ "$(cat build-gcc/valgrind.rc)" = 0 ] || { echo "valgrind stage failed"; status=1; }
echo "== ThreadSanitizer"
if [ "$(cat build-tsan/ctest.rc)" = 0 ]; then
    tail -n 3 build-tsan/ctest.log
else
    cat build-tsan/ctest.log
    echo "ThreadSanitizer run failed"
    status=1
fi
echo "== full-size campaigns (gcc Release)"
if [ "$(cat build-gcc/ctest.rc)" = 0 ]; then
    tail -n 3 build-gcc/ctest.log
else
    cat build-gcc/ctest.log
    echo "full-size campaigns failed"
    status=1
fi
echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
sed -n '/tests passed/q;p' build-san/ctest.log
# Sanitizer reports halt the test that made them; count any that a test printed anyway.
reports="$({ grep -hcE 'ERROR: (Address|Leak)Sanitizer|runtime error:|WARNING: ThreadSanitizer' \
    build-san/Testing/Temporary/LastTest.log build-tsan/Testing/Temporary/LastTest.log || true; } |
    awk '{s += $1} END {print s + 0}')"
bash scripts/reliability.sh --summary build-san/Testing/Temporary/LastTest.log \
    build-gcc/Testing/Temporary/LastTest.log
echo "sanitizers: reports=$reports"
echo "== stage times (s)"
printf '%s' "$timings" | awk '{ t = $NF; $NF = ""; printf "  %-28s %5d\n", $0, t }'
printf "  %-28s %5d\n" "whole command" "$((SECONDS - start))"
echo "== ctest (AddressSanitizer + UndefinedBehaviorSanitizer)"
sed -n '/tests passed/,$p' build-san/ctest.log
[ "$(cat build-san/ctest.rc)" = 0 ] || status=1
exit "$status"
