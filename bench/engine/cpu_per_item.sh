#!/bin/sh
# Instructions per batched item (callgrind), the figures of BENCHMARKS.md's "CPU per batched
# item": for each queue type, push_batch pushes N batches of 100 items and pops them back with
# pop_k of 100; the instructions of kvq_queue_push_many and of kvq_queue_pop_k (inclusive: the
# caller's thread, commit included) at N = 300 minus those at N = 100, divided by the 20,000
# items between. Counting those two calls only leaves out open and close, whose work (the log
# store's checkpoint at close) depends on how long the run took. Usage:
#   cpu_per_item.sh BUILD_DIR [TYPE...]     (types: durable fifo priority; default durable fifo)
# Needs valgrind (callgrind_annotate).
set -eu
build=${1:?usage: cpu_per_item.sh BUILD_DIR [TYPE...]}
shift
[ $# -gt 0 ] || set -- durable fifo
bin=$build/bench/engine/push_batch
# No periodic apply of the log store: its timer would make the counts depend on the run's speed.
export KVQ_LOGSTORE_APPLY_MS=${KVQ_LOGSTORE_APPLY_MS:-1000000000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
run() { # batches type: "push pop", the inclusive instructions of the two calls
    rm -rf "$tmp/db"
    mkdir "$tmp/db"
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$bin" --dir "$tmp/db" \
        --batches "$1" --type "$2" --pop >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    callgrind_annotate --inclusive=yes "$tmp/cg.out" 2>/dev/null | tr -d , | awk '
        /:kvq_queue_push_many \[/ { push = $1 }
        /:kvq_queue_pop_k \[/ { pop = $1 }
        END { print push + 0, pop + 0 }'
}
for type in "$@"; do
    read -r push3 pop3 <<EOF2
$(run 300 "$type")
EOF2
    read -r push1 pop1 <<EOF2
$(run 100 "$type")
EOF2
    echo "$type: push x100 $(( (push3 - push1) / 20000 )) instructions per item," \
        "pop_k x100 $(( (pop3 - pop1) / 20000 ))"
done
