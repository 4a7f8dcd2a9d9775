#!/usr/bin/env bash
# End-to-end tests of the kvq command, round 3: nothing read or popped is lost without a word,
# and nothing surprises. Usage: test_cli_safety.sh PATH-TO-KVQ
set -u
KVQ="$1"
T="$(mktemp -d /tmp/kvq-cli3-XXXXXX)"
trap 'rm -rf "$T"' EXIT
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
# Waits up to 10 s for queue $1 to hold $2 items.
wait_len() { for _ in $(seq 1 200); do [ "$(len "$1")" = "$2" ] && return 0; sleep 0.05; done; return 1; }

k create s >/dev/null
for c in check backup export import; do
    check "$c --help" bash -c "'$KVQ' $c --help | grep -q 'usage: kvq'"
done

# ---- push from a stream: committed when input goes idle, and on SIGINT/SIGTERM ----------------
"$KVQ" --db "$DB" push s < <(echo a; sleep 3; echo b) &
pp=$!
check "stream: a line is committed once input is idle (flush interval), not at the end" wait_len s 1
wait $pp; rc=$?
check "stream: the rest at the end" bash -c "[ $rc = 0 ] && [ \"\$('$KVQ' --db '$DB' len s)\" = 2 ]"
k pop s -n 10 >/dev/null
"$KVQ" --db "$DB" push s --flush 2s < <(echo a; sleep 4; echo b) &
pp=$!
sleep 1
check "stream --flush 2s: nothing yet after 1 s" bash -c "[ \"\$('$KVQ' --db '$DB' len s)\" = 0 ]"
check "stream --flush 2s: committed within the interval" wait_len s 1
wait $pp
k pop s -n 10 >/dev/null
for sig in INT TERM; do
    "$KVQ" --db "$DB" push s < <(printf 'one\ntwo\nhalf'; sleep 20) 2>"$T/sig.err" &
    pp=$!
    sleep 0.5
    kill -$sig $pp
    wait $pp; rc=$?
    want=$([ $sig = INT ] && echo 130 || echo 143)
    check "SIG$sig during push: the lines read are committed, exit $want, the count said" bash -c "[ $rc = $want ] && [ \"\$('$KVQ' --db '$DB' pop s -n 10 | tr '\n' ,)\" = one,two, ] && grep -q '2 values pushed' '$T/sig.err' && grep -q '4 bytes' '$T/sig.err'"
done
# The JSON form of an interrupted push: one value with the count.
"$KVQ" --db "$DB" --json push s < <(printf 'x\n'; sleep 20) >"$T/j" 2>/dev/null &
pp=$!
sleep 0.5; kill -TERM $pp; wait $pp
check "SIGTERM during push --json: one JSON value with the count" python3 -c "import json; v=json.load(open('$T/j')); assert v['pushed']==1 and v['signal']==15, v"
k pop s -n 10 >/dev/null

# ---- a push that fails part-way says exactly what was pushed -----------------------------------
big=$(head -c 200000 /dev/zero | tr '\0' x)
{ seq 1 149; echo "$big"; echo after; } > "$T/in"
k push s < "$T/in" 2>"$T/err"; rc=$?
check "a bad line: the lines before it are pushed, it and those after are not" bash -c "[ $rc = 2 ] && [ \"\$('$KVQ' --db '$DB' len s)\" = 149 ]"
check "a bad line: the message says how many were pushed and which value failed" bash -c "grep -q 'value 150' '$T/err' && grep -q '149 pushed' '$T/err'"
k pop s -n 1000 >/dev/null
k --json push s < "$T/in" >"$T/j" 2>/dev/null
check "a bad line, --json: one JSON value with the count and the error" python3 -c "import json; v=json.load(open('$T/j')); assert v['pushed']==149 and v['error']['name']=='value_too_large', v"
k pop s -n 1000 >/dev/null
k push s a b "$(head -c 110000 /dev/zero | tr '\0' x)" c 2>"$T/err"; rc=$?
check "a bad argument: those before it pushed, the count said" bash -c "[ $rc = 2 ] && [ \"\$('$KVQ' --db '$DB' len s)\" = 2 ] && grep -q 'value 3 (2 pushed' '$T/err'"
k pop s -n 1000 >/dev/null

# ---- pop into a closed output: the popped but unwritten items are counted ----------------------
# Values of 100 bytes: 500 kB, more than a pipe holds, so pop blocks on the pipe until head has
# exited however the machine schedules them (5,000 short numbers fit a pipe: pop could finish
# before head read a line, and exit 0).
seq 1 5000 | awk '{ printf "%05d%095d\n", $1, 0 }' | k push s
"$KVQ" --db "$DB" pop s -n 5000 2>"$T/err" | head -1 >/dev/null; rc=${PIPESTATUS[0]}
lost=$(sed -n 's/.*: \([0-9]*\) popped items* w.*/\1/p' "$T/err")
check "pop | head -1: exit 141, the lost items counted" bash -c "[ $rc = 141 ] && [ -n '$lost' ] && [ '$lost' -ge 1 ]"
check "pop | head -1: left + read + lost = 5000, and no more popped than one transaction" bash -c "l=\$('$KVQ' --db '$DB' len s); w=\$(sed -n 's/.*(\([0-9]*\) read from it).*/\1/p' '$T/err'); [ \$((l + w + $lost)) = 5000 ] && [ \$l -ge 3000 ]"
k pop s -n 10000 >/dev/null

# ---- values: -0 (NUL-delimited), --file, the limit ---------------------------------------------
printf 'line one\nline two\0second\0' | k push -0 s
check "push -0 / pop -0: values with newlines" bash -c "[ \"\$('$KVQ' --db '$DB' pop -0 s -n 5 | od -An -c | tr -s ' ' | tr -d '\n')\" = ' l i n e o n e \n l i n e t w o \0 s e c o n d \0' ]"
head -c 5000 /dev/urandom > "$T/blob"; printf 'a\nb\r\n' >> "$T/blob"
k push s --file "$T/blob"
k pop -0 s | head -c -1 > "$T/blob.out"
check "push --file: one whole file as one value, byte for byte" cmp -s "$T/blob" "$T/blob.out"
head -c 100001 /dev/zero > "$T/toobig"
k push s --file "$T/toobig" 2>"$T/err"; rc=$?
check "push --file over 100,000 bytes: exit 2 naming the limit" bash -c "[ $rc = 2 ] && grep -q 100000 '$T/err' && [ \"\$('$KVQ' --db '$DB' len s)\" = 0 ]"
head -c 100000 /dev/zero | tr '\0' y > "$T/max"
k push s --file "$T/max"
check "push --file of exactly 100,000 bytes" bash -c "[ \"\$('$KVQ' --db '$DB' pop s | wc -c)\" = 100001 ]"
printf 'crlf\r\n' | k push s
check "CRLF: the \\r is kept (documented)" bash -c "[ \"\$('$KVQ' --db '$DB' pop s | od -An -c | tr -d ' \n')\" = 'crlf\r\n' ]"
check "the value limit is in the man page and in push --help" bash -c "grep -q '100,000 bytes' '$(dirname "$0")/../../docs/kvq.1' && '$KVQ' push --help | grep -q '100,000'"

# ---- consume --exec: what pop prints, the item's variables, the exit status, no orphan --------
k create ex --max-deliveries 2 >/dev/null
k push ex one 'two words'
k consume ex --drain --exec 'read -r v && echo "$v|$KVQ_QUEUE|$KVQ_DELIVERIES|${#KVQ_LEASE}|$KVQ_WORKER" >> '"'$T/ex.out'" 2>"$T/err"; rc=$?
check "consume --exec 'read v': every item succeeds (the value ends with a newline)" bash -c "[ $rc = 0 ] && [ \"\$(sort '$T/ex.out' | tr '\n' ,)\" = 'one|ex|1|88|0,two words|ex|1|88|0,' ] && [ -z \"\$('$KVQ' --db '$DB' dlq list ex)\" ]"
k push ex tok >/dev/null
k consume ex --drain --exec "cat >/dev/null; '$KVQ' extend \"\$KVQ_QUEUE\" \"\$KVQ_LEASE\" > '$T/ext.out'" 2>/dev/null
check "consume --exec: \$KVQ_LEASE and \$KVQ_DB let the command extend its own lease" bash -c "[ \$(wc -c < '$T/ext.out') = 89 ]"
printf 'a\nb' | k push ex --file -
k consume ex --drain --raw --exec "cat > '$T/raw.out'" 2>/dev/null
check "consume --raw: the value's bytes alone" bash -c "[ \"\$(od -An -c '$T/raw.out' | tr -d ' \n')\" = 'a\nb' ]"
k push ex bad
k consume ex --drain --nack-delay 0 --exec 'cat >/dev/null; exit 7' >/dev/null 2>"$T/err"; rc=$?
check "consume --exec: the failure names the command's exit status" bash -c "[ $rc = 5 ] && grep -q 'exited with status 7' '$T/err'"
k create orphan --lease 1s >/dev/null
k push orphan job
rm -f "$T/started" "$T/ran"
"$KVQ" --db "$DB" consume orphan --exec "cat > '$T/started'; sleep 3; echo ran >> '$T/ran'" 2>/dev/null &
pk=$!
for _ in $(seq 1 200); do [ -s "$T/started" ] && break; sleep 0.05; done
kill -9 $pk; wait $pk 2>/dev/null
sleep 4
check "SIGKILL of consume: its command does not run on (the job cannot run twice)" bash -c "[ -s '$T/started' ] && [ ! -e '$T/ran' ]"
# Ctrl-C of consume's process group: exit 130, as watch and push; at most once, the commands of
# the popped batch still run, so nothing popped is lost.
k create amo >/dev/null
seq 1 40 | k push amo
rm -f "$T/amo.out"
setsid "$KVQ" --db "$DB" consume amo --at-most-once --batch 5 --exec "v=\$(cat); sleep 0.1; echo \"\$v\" >> '$T/amo.out'" 2>"$T/amo.err" &
pa=$!
for _ in $(seq 1 100); do [ -s "$T/amo.out" ] && break; sleep 0.05; done
kill -INT -- -$pa
wait $pa; rc=$?
check "Ctrl-C of consume --at-most-once --exec: exit 130, every popped item handed over" bash -c "[ $rc = 130 ] && cat '$T/amo.out' <('$KVQ' --db '$DB' pop amo -n 100) | sort -n | diff - <(seq 1 40) >/dev/null && grep -q ' 0 popped but not handed over' '$T/amo.err'"

# ---- create and delete never touch what is not the queue's ---------------------------------------
# (The library's tests put the application's own keys beside a queue: test_named_safety.) Here:
# delete leaves the subspace empty of the queue's keys, leases and dead letters included, so that
# the name can be created again (create refuses a subspace that holds any key).
for t in durable priority fifo; do
    k create "re-$t" --type $t >/dev/null
    k push "re-$t" a b c
    [ $t != fifo ] && k receive "re-$t" >/dev/null
    k delete "re-$t"
    k create "re-$t" --type $t >/dev/null 2>"$T/err"; rc=$?
    check "delete, then create again ($t): the subspace is clean" bash -c "[ $rc = 0 ] && [ \"\$('$KVQ' --db '$DB' len re-$t)\" = 0 ]"
done
k create adopted --adopt >/dev/null; rc=$?
check "create --adopt of a fresh name: exit 0" bash -c "[ $rc = 0 ]"

# ---- a due item is ready for every reader ----------------------------------------------------------
k create due >/dev/null
k create notyet >/dev/null
k push notyet --delay 10m never
check "a delayed item is not ready before its time" bash -c "[ \"\$('$KVQ' --db '$DB' len notyet)\" = 0 ] && [ \"\$('$KVQ' --db '$DB' --json stats notyet | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"delayed\"])')\" = 1 ]"
k push due --delay 400ms later
sleep 0.7
check "a due delayed item: len counts it, peek and pop see it" bash -c "[ \"\$('$KVQ' --db '$DB' len due)\" = 1 ] && [ \"\$('$KVQ' --db '$DB' peek due)\" = later ] && [ \"\$('$KVQ' --db '$DB' pop due)\" = later ]"
k push due again
k receive due --lease 200ms >/dev/null
sleep 0.5
check "an ended lease: the item is back for stats and pop" bash -c "'$KVQ' --db '$DB' --json stats due | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"length\"]==1 and v[\"in_flight\"]==0, v' && [ \"\$('$KVQ' --db '$DB' pop due)\" = again ]"
# The issue's scenario, each reader the first to look once the item is due (versions follow the
# monotonic clock, so 0.7 s after the push returned a 500 ms delay has passed; nothing else in
# the command line makes due items ready: the library's readers do).
for r in pop peek len stats prom list queues; do
    k create "d-$r" >/dev/null
    k push "d-$r" --delay 500 x
done
sleep 0.7
check "push --delay 500 x; wait; pop: x" bash -c "[ \"\$('$KVQ' --db '$DB' pop d-pop)\" = x ]"
check "push --delay 500 x; wait; peek: x" bash -c "[ \"\$('$KVQ' --db '$DB' peek d-peek)\" = x ]"
check "push --delay 500 x; wait; len: 1" bash -c "[ \"\$('$KVQ' --db '$DB' len d-len)\" = 1 ]"
check "push --delay 500 x; wait; stats: ready, not delayed" bash -c "'$KVQ' --db '$DB' --json stats d-stats | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"length\"]==1 and v[\"delayed\"]==0, v'"
"$KVQ" --db "$DB" stats d-prom --prometheus >"$T/prom.out"
check "push --delay 500 x; wait; stats --prometheus: length 1, delayed 0" bash -c "grep -qx 'kvq_queue_length{queue=\"d-prom\",type=\"durable\"} 1' '$T/prom.out' && grep -qx 'kvq_queue_delayed{queue=\"d-prom\",type=\"durable\"} 0' '$T/prom.out'"
check "push --delay 500 x; wait; list: x" bash -c "[ \"\$('$KVQ' --db '$DB' list d-list)\" = x ]"
check "push --delay 500 x; wait; queues: length 1" bash -c "'$KVQ' --db '$DB' --json queues | python3 -c 'import json,sys; v=[q for q in json.load(sys.stdin) if q[\"name\"]==\"d-queues\"]; assert v[0][\"length\"]==1 and v[0][\"delayed\"]==0, v'"
k create pdue --type priority >/dev/null
k push pdue --delay 300ms --priority 3 p3
sleep 0.5
check "a due delayed item of a priority queue: pop sees it" bash -c "[ \"\$('$KVQ' --db '$DB' pop pdue)\" = p3 ]"
"$KVQ" --db "$DB" consume due --at-most-once >"$T/amo_due.out" 2>/dev/null &
pc=$!
sleep 0.3
k push due --delay 500ms soon
for _ in $(seq 1 1200); do [ -s "$T/amo_due.out" ] && break; sleep 0.05; done
kill -TERM $pc; wait $pc
check "consume --at-most-once: a delayed item pushed while it runs is consumed once due" bash -c "[ \"\$(cat '$T/amo_due.out')\" = soon ]"

# ---- clear is a purge -------------------------------------------------------------------------------
k create pu --max-deliveries 1 >/dev/null
k push pu r1 r2 f1 d1
k push pu --delay 1m later
t=$(k receive pu | cut -f1); k nack pu "$t"          # r1: one delivery, max 1: a dead letter
t2=$(k receive pu | cut -f1)                          # r2: in flight
got=$(k clear pu)
check "clear: every item, whatever its state, and the count (ready 2, in flight 1, delayed 1, dead 1)" bash -c "[ '$got' = 5 ] && '$KVQ' --db '$DB' --json stats pu | python3 -c 'import json,sys; v=json.load(sys.stdin); assert (v[\"length\"],v[\"in_flight\"],v[\"delayed\"],v[\"dead\"])==(0,0,0,0), v; assert v[\"cleared\"]==5 and v[\"popped\"]==0, v'"
k ack pu "$t2" 2>/dev/null; rc=$?
check "clear: a lease of a cleared item is gone (exit 1), nothing comes back" bash -c "[ $rc = 1 ] && sleep 0.1 && [ \"\$('$KVQ' --db '$DB' len pu)\" = 0 ] && [ -z \"\$('$KVQ' --db '$DB' dlq list pu)\" ] && [ -z \"\$('$KVQ' --db '$DB' list pu --delayed)\" ]"

# ---- smaller surprises --------------------------------------------------------------------------
k create ak >/dev/null
k push ak one two
t1=$(k receive ak | cut -f1); t2=$(k receive ak | cut -f1)
check "--json ack: one JSON value" bash -c "'$KVQ' --db '$DB' --json ack ak '$t1' | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"acked\"]==[\"$t1\"] and v[\"failed\"]==0, v'"
check "--json nack: one JSON value" bash -c "'$KVQ' --db '$DB' --json nack ak '$t2' | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"nacked\"]==\"$t2\", v'"
k create ak --exist-ok >/dev/null; rc=$?
check "create --exist-ok of an existing queue of the same type: exit 0" bash -c "[ $rc = 0 ]"
# (1.5 minutes, not seconds: the item must still be delayed when the read-only copy below is
# taken, however slow the machine or the build.)
k push ak --delay 1.5m later
check "durations with a fraction: --delay 1.5m" bash -c "'$KVQ' --db '$DB' --json list ak --delayed | python3 -c 'import json,sys; v=json.load(sys.stdin); assert len(v)==1 and 60.0<v[0][\"due_in_seconds\"]<=90, v'"
k peek ak --max 2>"$T/err"; rc=$?
check "peek --max on a durable queue: a usage error that names no C function" bash -c "[ $rc = 2 ] && grep -q -- '--max applies to priority queues' '$T/err' && ! grep -q 'kvq_' '$T/err'"
k len "$(head -c 20000 /dev/zero | tr '\0' x)" 2>"$T/err"; rc=$?
check "a 20,000-byte bad name is not echoed in full" bash -c "[ $rc = 2 ] && [ \$(wc -c < '$T/err') -lt 400 ] && grep -q '20000 bytes' '$T/err'"
k create "$(printf 'bad\033[31mname')" 2>"$T/err"
check "control bytes of a bad name are escaped, never printed raw" bash -c "! grep -q \$'\033' '$T/err' && grep -q 'x1b' '$T/err'"
printf 'caf\xc3\xa9\n\xff\xfe\n' | k push ak
k pop ak -n 5 >/dev/null
printf 'caf\xc3\xa9\n\xff\xfe\n' | k push ak
check "--json: a value that is not UTF-8 is {\"base64\": ...}, which strict parsers read" bash -c "'$KVQ' --db '$DB' --json pop ak -n 5 | python3 -c '
import json,sys,base64
v=json.loads(sys.stdin.read(), parse_constant=None)
assert v[0]==\"caf\u00e9\" and base64.b64decode(v[1][\"base64\"])==b\"\\xff\\xfe\", v
json.dumps(v).encode(\"utf-8\")'"
"$KVQ" --db "$T/none" --json len q >"$T/j" 2>/dev/null
"$KVQ" --db "$DB" --json len nosuch >"$T/j2" 2>/dev/null
check "--json errors carry the exit status (no_database and no_such_queue: 4, told apart by name)" bash -c "python3 -c 'import json; a=json.load(open(\"$T/j\"))[\"error\"]; b=json.load(open(\"$T/j2\"))[\"error\"]; assert a[\"exit\"]==4 and b[\"exit\"]==4 and a[\"name\"]==\"no_database\" and b[\"name\"]==\"no_such_queue\", (a,b)'"
DOCS="$(cd "$(dirname "$0")/../../docs" && pwd)"
check "docs/errors.md gives the exit statuses of the man page (4: no such queue)" bash -c "grep -q '| 4 |' '$DOCS/errors.md' && grep -q 'no_such_queue' '$DOCS/errors.md'"
# A database on read-only media (here: files and directory without write permission, read by a
# user who cannot write them) can be read with --read-only.
cp -r "$DB" "$T/ro"
chmod -R a+rX,a-w "$T/ro"; chmod a+rx "$T"
as_reader() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
as_reader "$KVQ" --db "$T/ro" len ak >/dev/null 2>"$T/err"; rc=$?
check "a read-only database without --read-only: exit 3, the message suggests --read-only" bash -c "[ $rc = 3 ] && grep -q -- '--read-only' '$T/err'"
got=$(as_reader "$KVQ" --db "$T/ro" --read-only --json stats ak 2>"$T/err"); rc=$?
check "--read-only: a read-only database can be read" bash -c "[ $rc = 0 ] && python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v[\"delayed\"]==1, v' '$got'"
as_reader "$KVQ" --db "$T/ro" --read-only push ak x >/dev/null 2>"$T/err"; rc=$?
check "--read-only: a write fails with exit 3, changing nothing" bash -c "[ $rc = 3 ] && grep -q permission_denied '$T/err'"
chmod -R u+w "$T/ro"
# A small file system: the 8 MiB reserve is said, not a bare "disk is full".
mkdir -p "$T/small"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=4m tmpfs "$T/small" 2>/dev/null; then
    "$KVQ" --db "$T/small/db" create q >/dev/null 2>"$T/err"; rc=$?
    umount "$T/small"
    check "create on a 4 MB file system: exit 3, the reserve explained" bash -c "[ $rc = 3 ] && grep -q '8 MiB' '$T/err'"
else
    echo "skip - create on a 4 MB file system (mounting a tmpfs needs root)"
fi

# ---- export and import as JSON lines -----------------------------------------------------------------
k create ex1 >/dev/null
printf 'one\ntwo words\n\xff\xfe\n' | k push ex1
printf 'multi\nline' | k push ex1 --file -
k export ex1 >"$T/ex1.jsonl" 2>/dev/null
check "export: one JSON object per line, strict parsers read it" python3 -c "
import json,base64
v=[json.loads(l) for l in open('$T/ex1.jsonl', encoding='utf-8')]
assert [x['value'] for x in v[:2]]==['one','two words'] and base64.b64decode(v[2]['value']['base64'])==b'\xff\xfe' and v[3]['value']=='multi\nline', v"
k create ex2 >/dev/null
k import ex2 <"$T/ex1.jsonl" 2>/dev/null
check "import of an export: the same items, byte for byte" bash -c "'$KVQ' --db '$DB' export ex2 2>/dev/null | cmp -s - '$T/ex1.jsonl'"
k create exp --type priority >/dev/null
k push exp --priority 5 five; k push exp --priority -1 minus
k create exp2 --type priority >/dev/null
k export exp 2>/dev/null | k import exp2 2>/dev/null
check "export/import of a priority queue keeps the priorities" bash -c "[ \"\$('$KVQ' --db '$DB' pop exp2 --max)\" = five ] && [ \"\$('$KVQ' --db '$DB' pop exp2)\" = minus ]"
printf '{"value":"a"}\n{"value":"b"}\nnot json\n{"value":"c"}\n' | k import ex2 2>"$T/err"; rc=$?
check "import: a bad line stops it, exit 2, naming the line and the count" bash -c "[ $rc = 2 ] && grep -q 'line 3' '$T/err' && grep -q '2 items pushed' '$T/err'"

# ---- kvq check ---------------------------------------------------------------------------------------
DBC="$T/dbc"
# The items reach the table (logstore/data.db) when the push closes the database (no lag).
KVQ_LOGSTORE_APPLY_LAG_US=0 "$KVQ" --db "$DBC" create q >/dev/null
KVQ_LOGSTORE_APPLY_LAG_US=0 "$KVQ" --db "$DBC" push q ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZQQ a b
"$KVQ" --db "$DBC" check >"$T/out" 2>&1; rc=$?
check "check of a sound database: exit 0" bash -c "[ $rc = 0 ] && grep -q '^ok: ' '$T/out'"
python3 - "$DBC/logstore/data.db" <<'PYEOF'
import sys
p = sys.argv[1]
d = bytearray(open(p, 'rb').read())
i = d.find(b'ZZZZZZZZZZZZZZZZ')
assert i >= 0, 'the value is not in data.db'
d[i + 3] ^= 1
open(p, 'wb').write(d)
PYEOF
"$KVQ" --db "$DBC" check >"$T/out" 2>&1; rc=$?
check "check of a database with a flipped bit in a value: exit 3, saying so, with advice" bash -c "[ $rc = 3 ] && grep -q checksum '$T/out' && grep -q 'kvq export' '$T/out'"

# ---- kvq backup: a consistent copy while producers go on --------------------------------------------
DBB="$T/dbb"
"$KVQ" --db "$DBB" create q >/dev/null
seq 1 3000 | "$KVQ" --db "$DBB" push q
( for i in $(seq 1 30); do seq 1 100 | "$KVQ" --db "$DBB" push q; done ) &
pb=$!
sleep 0.2
"$KVQ" --db "$DBB" backup "$T/copy" >"$T/out" 2>&1; rc=$?
wait $pb
check "backup while pushes go on: exit 0" bash -c "[ $rc = 0 ] && grep -q 'keys' '$T/out'"
check "backup: the copy passes check (its counters agree with its items: one snapshot)" bash -c "'$KVQ' --db '$T/copy' check >/dev/null && [ \"\$('$KVQ' --db '$T/copy' len q)\" -ge 3000 ]"
"$KVQ" --db "$DBB" backup "$T/copy" >/dev/null 2>&1; rc=$?
check "backup into an existing directory: refused, exit 2" bash -c "[ $rc = 2 ]"

# A data.db of garbage with no kvq.marker beside it: damaged (exit 3), not "no database" (exit 4);
# and kvq create does not replace it.
mkdir "$T/garbage"; head -c 10000 /dev/urandom >"$T/garbage/data.db"; cp "$T/garbage/data.db" "$T/garbage.copy"
"$KVQ" --db "$T/garbage" len q >/dev/null 2>"$T/err"; rc=$?
"$KVQ" --db "$T/garbage" create q >/dev/null 2>&1; rc2=$?
check "a data.db of garbage: exit 3 saying damaged, and create leaves it" bash -c "[ $rc = 3 ] && grep -q damaged '$T/err' && [ $rc2 = 3 ] && cmp -s '$T/garbage/data.db' '$T/garbage.copy'"

# ---- bash completion ---------------------------------------------------------------------------------
COMP="$(cd "$(dirname "$0")/../../src/cli/completion" && pwd)/kvq.bash"
complete_words() { # complete_words WORD...: what bash would offer for the last word
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _kvq; printf "%s\n" "${COMPREPLY[@]}"' _ "$COMP" "$@"
}
got=$(complete_words "$KVQ" --db "$DB" pu | sort | tr '\n' ,)
check "completion: commands" bash -c "[ '$got' = 'push,' ]"
got=$(complete_words "$KVQ" --db "$DB" pop p | sort | tr '\n' ,)
check "completion: queue names from the --db given" bash -c "[ '$got' = 'pdue,pu,' ]"
got=$(complete_words "$KVQ" --db "$DB" consume pu --ra | tr '\n' ,)
check "completion: a command's options, from its --help" bash -c "[ '$got' = '--raw,' ]"
got=$(complete_words "$KVQ" create x --type p | tr '\n' ,)
check "completion: --type values" bash -c "[ '$got' = 'priority,' ]"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
