#!/usr/bin/env bash
# Runs the reliability stages (ctest label "reliability": crash campaigns, the serializability
# oracle, fault injection, damaged files, sync order, disk full, power cuts, fuzzing) and prints their
# machine-readable summary lines together, then ctest's summary.
#
#   scripts/reliability.sh [BUILD_DIR]      build (if BUILD_DIR is not given: build-rel, gcc,
#                                           Release) and run the stages
#   scripts/reliability.sh --summary LOG... only print the summary lines of finished ctest
#                                           runs (their Testing/Temporary/LastTest.log; a
#                                           missing one is said and skipped)
#
# Environment: KVQ_TEST_SCALE multiplies cycles, items and durations (scripts/soak.sh uses 20);
# KVQ_TEST_SEED replays a seed printed by an earlier run. Broken-engine runs print their lines
# too, marked broken_engine=...: their violations are the checkers proving that they can fail.
set -euo pipefail
cd "$(dirname "$0")/.."

# The stages' line prefixes (TESTING.md, "What to report").
pattern='^(crash|oracle|faults|badinput|syncorder|diskfull|storagefaults|resources|pause|powercut|fuzz|valgrind|sanitizers): '

summary() {
    echo "== reliability summary"
    # ctest's log keeps each test's output; the fdb double repeats the oracle (engine=fdb).
    local log
    for log in "$@"; do
        if [ ! -f "$log" ]; then
            echo "(no log $log)"
            continue
        fi
        grep -E "$pattern" "$log" || echo "(no summary lines found in $log)"
    done
}

if [ "${1:-}" = "--summary" ]; then
    shift
    summary "$@"
    exit 0
fi

build="${1:-build-rel}"
if [ ! -f "$build/CMakeCache.txt" ]; then
    CC="${CC:-gcc}" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVQ_WERROR=ON \
        -DKVQ_BUILD_TESTS=ON >/dev/null
fi
cmake --build "$build" -j"$(nproc)" >/dev/null
status=0
ctest --test-dir "$build" -L reliability -j"$(nproc)" --output-on-failure \
    >"$build/reliability.log" 2>&1 || status=$?
summary "$build/Testing/Temporary/LastTest.log"
echo "== ctest"
sed -n '/tests passed/,$p' "$build/reliability.log"
exit "$status"
