#!/usr/bin/env bash
# Runs one libFuzzer target (its arguments follow the target) and prints the stage's summary
# line, "fuzz: target=... execs=... corpus=... crashes=0", from libFuzzer's final statistics.
# The exit status is the fuzzer's: any crash, leak, timeout or sanitizer report fails the test.
set -uo pipefail
target="$1"
shift
log="$(mktemp)"
"$target" "$@" >"$log" 2>&1
rc=$?
execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
corpus="$(grep -o 'corp: [0-9]*' "$log" | tail -n 1 | sed 's/corp: //')"
crashes=0
if [ "$rc" -ne 0 ]; then
    cat "$log"
    crashes=1
fi
echo "fuzz: target=$(basename "$target") execs=${execs:-0} corpus=${corpus:-0} crashes=$crashes exit=$rc"
rm -f "$log"
exit "$rc"
