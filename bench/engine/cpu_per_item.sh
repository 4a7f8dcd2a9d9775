#!/bin/sh
# Instructions per batched item (callgrind), the figures of BENCHMARKS.md's "CPU per batched
# item": for each queue type, push_batch's push x100 and its pop_k x100, each the difference of
# a run of 300 batches and one of 100 (which takes out open and close), divided by 20,000 items.
# The pops' figure is (push + pop) minus push. Usage: cpu_per_item.sh BUILD_DIR [TYPE...]
# (types: durable fifo priority; default durable fifo). Needs valgrind.
set -eu
build=${1:?usage: cpu_per_item.sh BUILD_DIR [TYPE...]}
shift
[ $# -gt 0 ] || set -- durable fifo
bin=$build/bench/engine/push_batch
# No periodic apply of the log store: its timer would make the counts depend on the run's speed.
export KVQ_LOGSTORE_APPLY_MS=${KVQ_LOGSTORE_APPLY_MS:-1000000000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
count() { # batches, extra args: the instructions of one run
    rm -rf "$tmp/db"
    mkdir "$tmp/db"
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$bin" --dir "$tmp/db" \
        --batches "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    sed -n 's/^summary: //p' "$tmp/cg.out"
}
for type in "$@"; do
    p3=$(count 300 --type "$type")
    p1=$(count 100 --type "$type")
    b3=$(count 300 --type "$type" --pop)
    b1=$(count 100 --type "$type" --pop)
    push=$(( (p3 - p1) / 20000 ))
    pop=$(( ((b3 - b1) - (p3 - p1)) / 20000 ))
    echo "$type: push x100 $push instructions per item, pop_k x100 $pop"
done
