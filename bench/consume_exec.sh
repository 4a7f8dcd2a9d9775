#!/usr/bin/env bash
# consume --exec against xargs (issue 32 item 10): the same jobs handed to the same command by
#   kvq consume Q --workers W --ack --drain --exec CMD     (at least once, a lease per job)
#   xargs -P W -n 1 CMD                                     (no queue at all: the ceiling)
# alternating the two, ROUNDS times each, in one run, and printing jobs/s of each round and the
# ratio kvq / xargs of their medians. kvq hands a job to CMD on standard input and xargs as an
# argument: the default command is a two-line sh script that takes its job either way (kvq
# requires a command to read its whole item).
#
#   bench/consume_exec.sh [--kvq PATH] [--jobs N] [--workers W] [--rounds R] [--cmd CMD]
#                         [--storage sqlite|log]
#
# Wall-clock figures: on a shared machine they are noisy; compare only the ratio of one run.
set -euo pipefail

KVQ=${KVQ:-build/kvq}
JOBS=2000
WORKERS=4
ROUNDS=3
CMD=
STORAGE=
while [ $# -gt 0 ]; do
    case "$1" in
    --kvq) KVQ=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --cmd) CMD=$2; shift 2 ;;
    --storage) STORAGE=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "consume_exec.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$KVQ" ] || { echo "consume_exec.sh: no kvq at $KVQ (--kvq PATH)" >&2; exit 2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/kvq-cexec.XXXXXX")
trap 'rm -rf "$T"' EXIT
DB=$T/db
case "$STORAGE" in
"" | sqlite) URL=$DB ;;
log) URL=log:$DB ;;
*) echo "consume_exec.sh: --storage sqlite or log" >&2; exit 2 ;;
esac
seq 1 "$JOBS" >"$T/jobs"
if [ -z "$CMD" ]; then
    CMD=$T/job.sh
    printf '#!/bin/sh\nif [ $# -eq 0 ]; then read -r v; else v=$1; fi\n' >"$CMD"
    chmod +x "$CMD"
fi
"$KVQ" --db "$URL" create q >/dev/null

now() { date +%s.%N; }
rate() { awk -v n="$JOBS" -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", n / (b - a) }'; }

kvq_round() {
    "$KVQ" --db "$URL" push q <"$T/jobs" >/dev/null
    local a b
    a=$(now)
    "$KVQ" --db "$URL" consume q --workers "$WORKERS" --ack --drain --exec "$CMD" 2>"$T/err" || {
        cat "$T/err" >&2
        exit 1
    }
    b=$(now)
    grep -q "^kvq consume: $JOBS items acked" "$T/err" || { cat "$T/err" >&2; exit 1; }
    rate "$a" "$b"
}

xargs_round() {
    local a b
    a=$(now)
    # shellcheck disable=SC2086
    xargs -P "$WORKERS" -n 1 $CMD <"$T/jobs"
    b=$(now)
    rate "$a" "$b"
}

K=()
X=()
for r in $(seq 1 "$ROUNDS"); do
    k=$(kvq_round)
    x=$(xargs_round)
    K+=("$k")
    X+=("$x")
    echo "round $r: kvq consume ${k} jobs/s, xargs ${x} jobs/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mk=$(median "${K[@]}")
mx=$(median "${X[@]}")
awk -v k="$mk" -v x="$mx" -v j="$JOBS" -v w="$WORKERS" -v c="$CMD" -v s="${STORAGE:-sqlite}" \
    'BEGIN { printf "consume_exec: jobs=%d workers=%d cmd=\"%s\" storage=%s kvq=%.1f/s xargs=%.1f/s ratio=%.2f\n", j, w, c, s, k, x, k / x }'
