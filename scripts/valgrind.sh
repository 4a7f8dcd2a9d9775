#!/usr/bin/env bash
# S7, the valgrind smoke stage: runs a subset of the unit and conformance tests (fast ones that
# cover the tuple codec, the engine, the limits, damaged files and the queue layers) under
# valgrind's memcheck, two at a time, and prints "valgrind: tests=N errors=0 failed=0".
# Forked children stay under valgrind and their summaries are added; programs the tests exec
# (strace, a re-executed child) are not traced. Bounded to about a minute.
#
# Under valgrind a transaction runs 20-50 times slower, and more on a busy machine: the tests run
# with a 60 s transaction window instead of 5 s (the test knob $KVQ_TEST_TXN_WINDOW_MS; tests of
# the window itself set it back), so that a test's transaction is not too old (1007) just from
# being slow.
#
#   scripts/valgrind.sh BUILD_DIR        (a build with tests; scripts/test.sh uses build-gcc)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: scripts/valgrind.sh BUILD_DIR}"
tests=(test_util test_tuple test_emb_txn test_emb_internal test_emb_damage test_queue_basic
    test_consumer test_txn_basic test_txn_limits test_contract)
export KVQ_TEST_TXN_WINDOW_MS="${KVQ_TEST_TXN_WINDOW_MS:-60000}"
logs="$build/valgrind"
rm -rf "$logs"
mkdir -p "$logs"
# The SQLite storage's own tests run on it, as ctest runs them (tests/CMakeLists.txt, label sqlite).
sqlite_tests=" test_emb_damage "
export sqlite_tests
run_one() {
    local build="$1" logs="$2" t="$3"
    local rc=0 storage=""
    [[ "$sqlite_tests" == *" $t "* ]] && storage=sqlite
    KVQ_STORAGE="$storage" valgrind --error-exitcode=99 --leak-check=full --log-file="$logs/$t.vg" \
        "$build/tests/$t" >"$logs/$t.out" 2>&1 || rc=$?
    echo "$rc" >"$logs/$t.rc"
}
export -f run_one
printf '%s\n' "${tests[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one "$@"' _ "$build" "$logs" {}
errors=0
failed=0
skipped=0
for t in "${tests[@]}"; do
    # The first process's summary is the test's own (forked children write their own lines).
    n="$(grep -o 'ERROR SUMMARY: [0-9]*' "$logs/$t.vg" | awk '{s += $3} END {print s + 0}')"
    rc="$(cat "$logs/$t.rc")"
    errors=$((errors + n))
    if [ "$rc" = 77 ]; then
        # A test with a missing prerequisite reports itself skipped (tests/support/skip.c).
        skipped=$((skipped + 1))
        echo "valgrind: $t skipped: $(grep -h 'skipped' "$logs/$t.out" | tail -n 1)"
    elif [ "$rc" != 0 ]; then
        failed=$((failed + 1))
        echo "valgrind: $t exited $rc ($n errors); its report:"
        cat "$logs/$t.vg" "$logs/$t.out" | tail -n 60
    fi
done
echo "valgrind: tests=${#tests[@]} errors=$errors failed=$failed skipped=$skipped"
[ "$errors" = 0 ] && [ "$failed" = 0 ]
