#!/usr/bin/env bash
# Before/after on a busy machine: runs several builds' bench_engine and `kvq demo` in
# alternating rounds (A B C A B C ...) and prints, per round and build, the ratios that stay
# meaningful when the machine's speed moves: kvq 1 thread / raw SQLite and kvq 8 threads / kvq
# 1 thread (both from one bench_engine run); the demo's rates are to be compared between builds
# of the same round.
#
#   [ROUNDS=3] [SECONDS_EACH=2] bench/engine/ab.sh DIR_A DIR_B [DIR_C ...]
#
# Each DIR holds a `bench_engine` and a `kvq` binary (copies of a build's
# bench/engine/bench_engine and kvq). Data goes to $AB_TMPDIR (default /var/tmp).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: [ROUNDS=3] [SECONDS_EACH=2] ab.sh DIR_A DIR_B [DIR_C ...]" >&2; exit 2; }
rounds=${ROUNDS:-3}
secs=${SECONDS_EACH:-2}
tmp=$(mktemp -d "${AB_TMPDIR:-/var/tmp}/kvq-ab-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

engine() { # dir -> "raw 1t 1t/raw 8t/1t"
    "$1/bench_engine" --seconds "$secs" --dir "$tmp" | awk -F'|' '
        /raw SQLite loop/ { raw = $3 + 0 }
        /kvq, 1 thread/   { one = $3 + 0 }
        /kvq, 8 threads/  { eight = $3 + 0 }
        END { printf "%d %d %.2f %.2f", raw, one, one / raw, eight / one }'
}

demo() { # dir -> "push/s pop/s"
    rm -rf "$tmp/demo"
    "$1/kvq" --db "$tmp/demo" demo | awk '
        /^pushed/   { for (i = 1; i <= NF; i++) if ($i == "pushes/s") p = $(i - 1) }
        /^consumed/ { for (i = 1; i <= NF; i++) if ($i == "items/s") c = $(i - 1) }
        /^verified/ { ok = ($2 == "0") }
        END { if (!ok) print "demo-failed"; printf "%d %d", p, c }'
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | build | raw SQLite/s | kvq 1 thread/s | 1 thread / raw | 8 threads / 1 thread | demo push/s | demo pop/s |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for r in $(seq 1 "$rounds"); do
    for d in "$@"; do
        read -r raw one r1 r8 <<<"$(engine "$d")"
        read -r dp dc <<<"$(demo "$d")"
        echo "| $r | $(basename "$d") | $raw | $one | $r1 | $r8 | $dp | $dc |"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
