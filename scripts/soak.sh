#!/usr/bin/env bash
# The soak run: the same reliability stages as CI (ctest label "reliability", see
# scripts/reliability.sh) with every count multiplied by 20 (KVQ_TEST_SCALE=20: crash cycles,
# fault-injection items, the oracle's duration) and each fuzz target running 20 times longer,
# in a clang AddressSanitizer + UndefinedBehaviorSanitizer build of its own (build-soak). Prints
# every stage's summary line, then ctest's summary. Expect about half an hour on 2 cores.
#
#   scripts/soak.sh [SCALE]     (default 20)
#   KVQ_TEST_SEED=N scripts/soak.sh   replays a seed that an earlier run printed
set -euo pipefail
cd "$(dirname "$0")/.."
scale="${1:-20}"
export KVQ_TEST_SCALE="$scale"
export KVQ_SOAK=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
CC=clang cmake -S . -B build-soak -DCMAKE_BUILD_TYPE=Sanitize -DKVQ_WERROR=ON \
    -DKVQ_BUILD_TESTS=ON -DKVQ_FUZZ=ON -DKVQ_FUZZ_SECONDS=$((20 * scale)) \
    -DKVQ_FUZZ_RUNS=2000000000 -DKVQ_TEST_TIMEOUT_FACTOR=$((2 * scale)) -DKVQ_TEST_REDUCED=OFF \
    >/dev/null
echo "== soak: KVQ_TEST_SCALE=$scale, fuzzing $((20 * scale)) s per target"
exec bash scripts/reliability.sh build-soak
