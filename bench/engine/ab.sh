#!/usr/bin/env bash
# Before/after on a busy machine: runs several builds in alternating rounds (A B C A B C ...)
# and prints, per round and build, ratios taken within one run, so that they stay meaningful
# when the machine's speed moves between runs:
#   - wal_pages --no-scan: kvq_queue_push and kvq_queue_pop, one at a time, each divided by raw
#     SQLite's table queue doing the same right after it on the same disk;
#   - bench_engine: kvq 1 thread / raw SQLite, and kvq 8 threads / kvq 1 thread;
#   - with DEMO=1, `kvq demo` (defaults): push/s and pop/s, to be compared between the builds
#     of one round.
# Then the median of each ratio per build.
#
#   [ROUNDS=5] [N=1000] [SECONDS_EACH=1] [DEMO=0] bench/engine/ab.sh DIR_A DIR_B [DIR_C ...]
#
# Each DIR holds `wal_pages`, `bench_engine` and `kvq` (copies of a build's
# bench/engine/wal_pages, bench/engine/bench_engine and kvq). Data goes to $AB_TMPDIR (default
# /var/tmp).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: [ROUNDS=5] [N=1000] [SECONDS_EACH=1] [DEMO=0] ab.sh DIR_A DIR_B ..." >&2; exit 2; }
rounds=${ROUNDS:-5}
n=${N:-1000}
secs=${SECONDS_EACH:-1}
tmp=$(mktemp -d "${AB_TMPDIR:-/var/tmp}/kvq-ab-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

queue() { # dir -> "push/sqlite pop/sqlite"
    "$1/wal_pages" --n "$n" --no-scan --dir "$tmp" | awk '
        /kvq_queue_push/ { kp = $(NF - 2) } /kvq_queue_pop/ { kq = $(NF - 2) }
        /INSERT/ { sp = $(NF - 2) } /RETURNING/ { sq = $(NF - 2) }
        END { printf "%.2f %.2f", kp / sp, kq / sq }'
}

engine() { # dir -> "1t/raw 8t/1t"
    "$1/bench_engine" --seconds "$secs" --dir "$tmp" | awk -F'|' '
        /raw SQLite loop/ { raw = $3 + 0 }
        /kvq, 1 thread/   { one = $3 + 0 }
        /kvq, 8 threads/  { eight = $3 + 0 }
        END { printf "%.2f %.2f", one / raw, eight / one }'
}

demo() { # dir -> "push/s pop/s"
    rm -rf "$tmp/demo"
    "$1/kvq" --db "$tmp/demo" demo | awk '
        /^pushed/   { for (i = 1; i <= NF; i++) if ($i ~ /^pushes\/s/) p = $(i - 1) }
        /^consumed/ { for (i = 1; i <= NF; i++) if ($i ~ /^items\/s/) c = $(i - 1) }
        /^verified/ { ok = ($2 == "0") }
        END { if (!ok) { print "failed failed"; exit } printf "%d %d", p, c }'
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | build | push / SQLite | pop / SQLite | engine 1 thread / raw | engine 8 threads / 1 thread | demo push/s | demo pop/s |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
rows=$tmp/rows
for r in $(seq 1 "$rounds"); do
    for d in "$@"; do
        read -r qp qq <<<"$(queue "$d")"
        read -r e1 e8 <<<"$(engine "$d")"
        dp=- dc=-
        if [ "${DEMO:-0}" = 1 ]; then read -r dp dc <<<"$(demo "$d")"; fi
        b=$(basename "$d")
        echo "| $r | $b | $qp | $qq | $e1 | $e8 | $dp | $dc |"
        echo "$b $qp $qq $e1 $e8 $dp $dc" >>"$rows"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "medians over $rounds rounds:"
echo "| build | push / SQLite | pop / SQLite | engine 1 thread / raw | engine 8 threads / 1 thread | demo push/s | demo pop/s |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for d in "$@"; do
    b=$(basename "$d")
    line="| $b |"
    for col in 2 3 4 5 6 7; do
        med=$(awk -v b="$b" -v c="$col" '$1 == b { print $c }' "$rows" | sort -g |
              awk '{ v[NR] = $1 } END { if (NR == 0 || v[1] == "-") { print "-"; exit }
                     print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
        line="$line $med |"
    done
    echo "$line"
done
