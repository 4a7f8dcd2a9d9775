#!/usr/bin/env bash
# Shows that the campaigns scripts/test.sh leaves out of its ThreadSanitizer lane (tsan_skip)
# still run no second thread in any of their processes: runs each from a build (Release is
# enough) with a pthread_create that counts (count_threads.c), and fails on any thread. Run it
# again when the engine or these tests change (a storage with a thread of its own, say).
#   scripts/tests/tsan_skip_check.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: scripts/tests/tsan_skip_check.sh BUILD_DIR}"
skip="$(sed -n 's/^tsan_skip=(\(.*\))$/\1/p' "$here/../test.sh")"
[ -n "$skip" ] || { echo "tsan_skip_check: no tsan_skip in scripts/test.sh" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cc -O1 -shared -fPIC -o "$tmp/count_threads.so" "$here/count_threads.c" -ldl
status=0
for t in $skip; do
    log="$tmp/$t.log"
    : >"$log"
    rc=0
    KVQ_THREADS_LOG="$log" LD_PRELOAD="$tmp/count_threads.so" "$build/tests/$t" \
        >"$tmp/$t.out" 2>&1 || rc=$?
    threads=$(wc -l <"$log")
    echo "$t: exit $rc, threads created $threads"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        tail -n 20 "$tmp/$t.out"
        status=1
    fi
    [ "$threads" = 0 ] || status=1
done
exit "$status"
