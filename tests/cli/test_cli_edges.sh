#!/usr/bin/env bash
# End-to-end tests of the kvq command, round 4 (issue 32, "nothing lost at the edges"): what a
# new user hit at the edges of the command line. Usage: test_cli_edges.sh PATH-TO-KVQ
set -u
KVQ="$1"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
T="$(mktemp -d /tmp/kvq-cli4-XXXXXX)"
MNT=""
cleanup() {
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
DB="$T/db"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { # check NAME COMMAND...: passes when the command succeeds
    local name="$1"; shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}
k() { "$KVQ" --db "$DB" "$@"; }
len() { "$KVQ" --db "$DB" len "$1"; }

k create s >/dev/null

# ---- 1. Ctrl-C: the writer's half-written last line is not a value ----------------------------
# A terminal's Ctrl-C is a signal to the process group: the writer of the pipe dies in the middle
# of a line and kvq gets the signal at once, often while it commits (the signal blocked), so that
# it then reads the rest of the pipe up to the end of input the writer's death makes. The pipeline
# runs in a session of its own (setsid) and gets the signal as a group. A background job of a
# non-interactive shell ignores SIGINT (and the wrapping shell here ignores both signals, to
# report kvq's exit status), so the writer puts them back to the default. Every write of the
# writer ends in the middle of a line, so the pipe holds a cut line when it dies.
cat > "$T/writer.py" <<'PY'
import os, signal
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
i, carry = 1, b""
while True:
    data = carry + b"".join(b"%d\n" % j for j in range(i, i + 1000))
    i += 1000
    os.write(1, data[:-3])
    carry = data[-3:]
PY
for run in 1 2 3 TERM; do
    sig=INT; [ $run = TERM ] && sig=TERM
    k create cc >/dev/null
    setsid bash -c "trap '' INT TERM; python3 '$T/writer.py' | '$KVQ' --db '$DB' push cc 2>'$T/cc.err'; echo \$? > '$T/cc.rc'" &
    sp=$!
    for _ in $(seq 1 400); do [ "$(len cc)" -gt 0 ] 2>/dev/null && break; sleep 0.05; done
    sleep 0.5 # pushing at full speed: the signal comes while kvq commits, most of the time
    kill -$sig -- -$sp
    wait $sp
    n=$(len cc)
    want=$([ $sig = INT ] && echo 130 || echo 143)
    check "SIG$sig of the process group (run $run): exit $want, $n values pushed, every one whole (1..$n)" bash -c "[ \"\$(cat '$T/cc.rc')\" = $want ] && grep -q 'stopped by SIG$sig: $n values pushed' '$T/cc.err' && '$KVQ' --db '$DB' list cc | cmp -s - <(seq 1 $n)"
    check "SIG$sig of the process group (run $run): the cut line is said, with its size" grep -Eq "a last [0-9]+ bytes without their newline were not pushed" "$T/cc.err"
    k delete cc
done
printf 'a\nb' | k push s
check "a plain end of input: an unterminated last line is a value" bash -c "[ \"\$('$KVQ' --db '$DB' pop s -n 5 | tr '\n' ,)\" = a,b, ]"

# ---- 7. the position of a failed push does not depend on how the input was read -------------
for size in 100001 100005 131072 200000; do
    { echo ok1; head -c $size /dev/zero | tr '\0' x; echo; echo ok3; } > "$T/in7"
    for how in file pipe slow; do
        case $how in
        file) k push s < "$T/in7" 2>"$T/err7"; rc=$? ;;
        pipe) cat "$T/in7" | k push s 2>"$T/err7"; rc=$? ;;
        slow) { echo ok1; sleep 0.3; tail -n +2 "$T/in7"; } | k push s 2>"$T/err7"; rc=$? ;;
        esac
        check "push of ok1, a $size-byte line, ok3 ($how): value 2 failed, ok1 pushed" bash -c "[ $rc = 2 ] && grep -q 'push failed at value 2 (1 pushed before it)' '$T/err7' && grep -q 'line 2' '$T/err7' && [ \"\$('$KVQ' --db '$DB' pop s -n 5 | tr '\n' ,)\" = ok1, ]"
    done
done
k push s a "$(head -c 100001 /dev/zero | tr '\0' x)" c 2>"$T/err7"; rc=$?
check "push of arguments: value 2 failed, 1 pushed before it" bash -c "[ $rc = 2 ] && grep -q 'value 2 (1 pushed before it)' '$T/err7' && [ \"\$('$KVQ' --db '$DB' pop s -n 5 | tr '\n' ,)\" = a, ]"

echo "# $pass passed, $fail failed"
[ $fail = 0 ]
