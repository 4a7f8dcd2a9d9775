#!/usr/bin/env bash
# End-to-end tests of the kvq command. Usage: test_cli.sh PATH-TO-KVQ
set -u
KVQ="$1"
T="$(mktemp -d /tmp/kvq-cli-XXXXXX)"
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

# --help everywhere, and the usage errors.
check "kvq --help" bash -c "'$KVQ' --help | grep -q 'commands:'"
for c in create alter delete queues push pop peek len list clear watch stats consume bench demo receive ack nack extend dlq; do
    check "$c --help" bash -c "'$KVQ' $c --help | grep -q 'usage: kvq'"
done
"$KVQ" frobnicate >/dev/null 2>"$T/err"; rc=$?
check "unknown command: exit 2 naming it" bash -c "[ $rc = 2 ] && grep -q frobnicate '$T/err'"
"$KVQ" --db "$DB" pop >/dev/null 2>"$T/err"; rc=$?
check "missing NAME: exit 2 naming it" bash -c "[ $rc = 2 ] && grep -q NAME '$T/err'"

# Push, pop and len by arguments and through pipes.
k create jobs
k push jobs one two three
printf 'four\nfive\n' | k push jobs
check "len after pushes" bash -c "[ \"\$('$KVQ' --db '$DB' len jobs)\" = 5 ]"
check "pop one" bash -c "[ \"\$('$KVQ' --db '$DB' pop jobs)\" = one ]"
check "pop -n 2 keeps order" bash -c "[ \"\$('$KVQ' --db '$DB' pop jobs -n 2 | tr '\n' ,)\" = two,three, ]"
check "pop into a pipe" bash -c "'$KVQ' --db '$DB' pop jobs -n 10 | grep -qx five"
k pop jobs >/dev/null 2>"$T/err"; rc=$?
check "pop on empty: exit 1" bash -c "[ $rc = 1 ] && grep -q empty '$T/err'"
k len nosuch >/dev/null 2>"$T/err"; rc=$?
check "unknown queue: exit 4 naming it" bash -c "[ $rc = 4 ] && grep -q nosuch '$T/err'"
k pop jobs -n zero >/dev/null 2>"$T/err"; rc=$?
check "bad -n: exit 2" bash -c "[ $rc = 2 ] && grep -q -- '-n' '$T/err'"
k create jobs >/dev/null 2>&1; rc=$?
check "create twice: exit 2" bash -c "[ $rc = 2 ]"
k create other --type nonsense >/dev/null 2>"$T/err"; rc=$?
check "bad type: exit 2 naming it" bash -c "[ $rc = 2 ] && grep -q nonsense '$T/err'"

# JSON output parses.
k push jobs 'a "quoted" value' $'tab\there'
check "--json list" bash -c "'$KVQ' --db '$DB' --json list jobs | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[0]==\"a \\\"quoted\\\" value\", v'"
check "--json stats" bash -c "'$KVQ' --db '$DB' --json stats jobs | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"length\"]==2 and v[\"sent\"]==7, v'"
check "--json queues" bash -c "'$KVQ' --db '$DB' --json queues | python3 -c 'import json,sys; v=json.load(sys.stdin); assert any(q[\"name\"]==\"jobs\" and q[\"type\"]==\"durable\" for q in v), v'"
sleep 0.3
check "--json stats: the oldest item's age" bash -c "'$KVQ' --db '$DB' --json stats jobs | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"oldest_age_seconds\"]>=0.25, v'"
k clear jobs
check "stats of an empty queue: no age" bash -c "! '$KVQ' --db '$DB' stats jobs | grep -q oldest_age"
check "clear empties" bash -c "[ \"\$('$KVQ' --db '$DB' len jobs)\" = 0 ]"

# consume --exec hands each item to a command (one short append per item, so that concurrent
# workers' lines never interleave).
k create work
seq 1 200 | k push work
k consume work --at-most-once --workers 3 --batch 7 --drain --exec "v=\$(cat); echo \"\$v\" >> '$T/exec.out'" 2>/dev/null
check "consume --exec got every item once" bash -c "sort -n '$T/exec.out' | grep -v '^$' | diff - <(seq 1 200) >/dev/null"

# Two consumer processes on one queue: no duplicates, nothing missing. Both start first and
# sleep on the watch; then the items arrive while both are running.
"$KVQ" --db "$DB" consume work --at-most-once --workers 2 --batch 10 >"$T/c1" 2>/dev/null &
p1=$!
"$KVQ" --db "$DB" consume work --at-most-once --workers 2 --batch 10 >"$T/c2" 2>/dev/null &
p2=$!
sleep 0.3
seq 1 3000 | k push work
for _ in $(seq 1 300); do
    [ "$(k len work)" = 0 ] && break
    sleep 0.1
done
kill -TERM $p1 $p2
wait $p1 $p2
check "two consumer processes: exactly once" bash -c "cat '$T/c1' '$T/c2' | sort -n | diff - <(seq 1 3000) >/dev/null"

# SIGTERM during consume loses nothing: what was consumed plus what is left is everything.
seq 1 5000 | k push work
"$KVQ" --db "$DB" consume work --at-most-once --workers 2 --batch 5 --exec "v=\$(cat); echo \"\$v\" >> '$T/slow.out'" 2>"$T/term.err" &
pc=$!
# Signal once the consumer is mid-stream (it has handed over at least one item).
for _ in $(seq 1 200); do
    [ -s "$T/slow.out" ] && break
    sleep 0.05
done
kill -TERM $pc
wait $pc; rc=$?
k pop work -n 100000 >"$T/rest" 2>/dev/null
check "SIGTERM: consume exits 0" bash -c "[ $rc = 0 ]"
check "SIGTERM: consumed + left = all, once" bash -c "cat '$T/slow.out' '$T/rest' | grep -v '^$' | sort -n | diff - <(seq 1 5000) >/dev/null"
check "SIGTERM: something was consumed before the signal" bash -c "grep -q . '$T/slow.out'"

# watch wakes on a push and times out without one.
k create w
( sleep 0.3; "$KVQ" --db "$DB" push w hello ) &
check "watch wakes on a push" bash -c "[ \"\$(timeout 10 '$KVQ' --db '$DB' watch w)\" = 1 ]"
wait
k watch w --timeout 100 >/dev/null; rc=$?
check "watch times out: exit 1" bash -c "[ $rc = 1 ]"

# FIFO and priority queues, through the recipes' layers.
k create f --type fifo
k push f a b
printf 'c\nd\n' | k push f
check "fifo: len" bash -c "[ \"\$('$KVQ' --db '$DB' len f)\" = 4 ]"
check "fifo: pop -n 3 in order" bash -c "[ \"\$('$KVQ' --db '$DB' pop f -n 3 | tr '\n' ,)\" = a,b,c, ]"
check "fifo: peek leaves the item" bash -c "[ \"\$('$KVQ' --db '$DB' peek f)\" = d ] && [ \"\$('$KVQ' --db '$DB' len f)\" = 1 ]"
k create p --type priority
k push p --priority 5 five
k push p --priority -3 minus3
k push p --priority 9 nine
printf 'one\nuno\n' | k push p --priority 1
check "priority: peek --max" bash -c "[ \"\$('$KVQ' --db '$DB' peek p --max)\" = nine ]"
check "priority: pop --max" bash -c "[ \"\$('$KVQ' --db '$DB' pop p --max)\" = nine ]"
check "priority: pop -n 3 lowest first, ties in push order" bash -c "[ \"\$('$KVQ' --db '$DB' pop p -n 3 | tr '\n' ,)\" = minus3,one,uno, ]"
check "priority: --json stats" bash -c "'$KVQ' --db '$DB' --json stats p | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"type\"]==\"priority\" and v[\"length\"]==1, v'"
k push f --priority 3 x >/dev/null 2>"$T/err"; rc=$?
check "--priority on a fifo queue: exit 2 naming the type" bash -c "[ $rc = 2 ] && grep -q fifo '$T/err'"
k pop f --max >/dev/null 2>"$T/err"; rc=$?
check "--max on a fifo queue: exit 2" bash -c "[ $rc = 2 ] && grep -q -- --max '$T/err'"
k consume p --at-most-once --drain >/dev/null 2>"$T/err"; rc=$?
check "consume on a priority queue: exit 2 naming the type" bash -c "[ $rc = 2 ] && grep -q priority '$T/err'"
k create f --type durable >/dev/null 2>"$T/err"; rc=$?
check "create as another type: exit 2 naming the existing one" bash -c "[ $rc = 2 ] && grep -q fifo '$T/err'"

# Work-queue commands: leases, ack, nack, extend, delays, dedup, dead letters.
k create wq --lease 20000 --max-deliveries 2
k push wq first second
line=$(k receive wq); tok=${line%%$'\t'*}
check "receive: token and value" bash -c "[ '${line#*$'\t'}' = first ] && [ ${#tok} = 88 ]"
k ack wq "$tok"; rc=$?
check "ack: exit 0" bash -c "[ $rc = 0 ]"
k ack wq "$tok" 2>"$T/err"; rc=$?
check "ack twice: exit 1 saying settled" bash -c "[ $rc = 1 ] && grep -q 'already' '$T/err'"
line=$(k receive wq --lease 100); tok=${line%%$'\t'*}
sleep 0.4
k ack wq "$tok" 2>"$T/err"; rc=$?
check "late ack after the lease: exit 1 saying expired" bash -c "[ $rc = 1 ] && grep -q expired '$T/err'"
check "expired item is delivered again, once" bash -c "[ \"\$('$KVQ' --db '$DB' receive wq | cut -f2)\" = second ] && ! '$KVQ' --db '$DB' receive wq >/dev/null 2>&1"
k ack wq abc >/dev/null 2>"$T/err"; rc=$?
check "ack with a bad token: exit 2" bash -c "[ $rc = 2 ] && grep -q token '$T/err'"
k push wq --delay 3000 later
k receive wq >/dev/null 2>&1; rc=$?
check "delayed item: not visible at once" bash -c "[ $rc = 1 ]"
sleep 3.5
check "delayed item: visible after its delay" bash -c "'$KVQ' --db '$DB' receive wq | cut -f2 | grep -qx later"
k create dd
k push dd --dedup order-1 payload
k --json push dd --dedup order-1 payload >"$T/dd.json"
check "dedup: the second push enqueues nothing" bash -c "[ \"\$('$KVQ' --db '$DB' len dd)\" = 1 ] && grep -q '\"duplicates\":1' '$T/dd.json'"
k create jobs2 --lease 2000 --max-deliveries 2
seq 1 10 | k push jobs2
k consume jobs2 --ack --nack-delay 0 --workers 2 --drain --exec "v=\$(cat); [ \"\$v\" != 4 ] || exit 1; echo \"\$v\" >> '$T/ack.out'" 2>"$T/ack.err"; rc=$?
check "consume --ack: every good item once, exit 5 for the failed one" bash -c "[ $rc = 5 ] && sort -n '$T/ack.out' | tr '\n' , | grep -qx '1,2,3,5,6,7,8,9,10,'"
# The first failure gives the item back; the failure of its last allowed delivery says that it
# went to the dead letters, and the summary counts it there (issue 32 item 8).
check "consume --ack: a failed delivery before the max says the item goes back" bash -c "[ \"\$(grep -c 'its item goes back (1 of 2 deliveries so far)' '$T/ack.err')\" = 1 ]"
check "consume --ack: the failed last delivery says dead letters, not goes back" bash -c "[ \"\$(grep -c 'its item goes to the dead letters (2 deliveries, the queue.s max' '$T/ack.err')\" = 1 ] && ! grep -q 'goes back (2' '$T/ack.err' && grep -q ' 1 given back after a failed command, 1 moved to the dead letters' '$T/ack.err'"
check "consume --ack: the poison item is dead-lettered" bash -c "'$KVQ' --db '$DB' dlq list jobs2 | grep -qx \$'2\t4'"
check "dlq redrive: back in the queue" bash -c "[ \"\$('$KVQ' --db '$DB' dlq redrive jobs2)\" = 1 ] && [ \"\$('$KVQ' --db '$DB' len jobs2)\" = 1 ]"
# A consumer killed mid-work: its item comes back after the lease, once.
k create crash --lease 500
k push crash survivor
# Its standard error goes through a pipe to a reader that must see the pipe's end once kvq is
# dead: nothing kvq started (the command, kvq's keeper of commands) may hold it open.
"$KVQ" --db "$DB" consume crash --ack --exec "cat > '$T/started'; sleep 30" 2> >(cat >/dev/null; echo eof >"$T/crash.eof") &
pk=$!
for _ in $(seq 1 400); do [ -s "$T/started" ] && break; sleep 0.05; done
kill -9 $pk; wait $pk 2>/dev/null
check "killed consumer: the item was received" bash -c "grep -qx survivor '$T/started'"
for _ in $(seq 1 200); do [ -s "$T/crash.eof" ] && break; sleep 0.05; done
check "killed consumer: neither its command nor its keeper outlives it" bash -c "[ -s '$T/crash.eof' ]"
sleep 0.8
k consume crash --ack --drain >"$T/again" 2>/dev/null
check "killed consumer: redelivered after the lease, once" bash -c "[ \"\$(cat '$T/again')\" = survivor ] && [ \"\$('$KVQ' --db '$DB' len crash)\" = 0 ]"
k receive f >/dev/null 2>"$T/err"; rc=$?
check "receive on a fifo queue: exit 2" bash -c "[ $rc = 2 ] && grep -q fifo '$T/err'"

# delete removes the queue and its data.
k delete w
k len w >/dev/null 2>&1; rc=$?
check "delete: the queue is gone" bash -c "[ $rc = 4 ]"

# A missing or damaged database gives a clear error (its table emptied: logstore/data.db).
: > "$DB/logstore/data.db"
k len jobs >/dev/null 2>"$T/err"; rc=$?
check "damaged database: exit 3 saying so" bash -c "[ $rc = 3 ] && grep -q damaged '$T/err'"
"$KVQ" --db "$T/file" len jobs >/dev/null 2>&1 || true
touch "$T/afile"
"$KVQ" --db "$T/afile" len jobs >/dev/null 2>"$T/err"; rc=$?
check "database path is a file: exit 3, saying so" bash -c "[ $rc = 3 ] && grep -q 'not a directory' '$T/err'"
"$KVQ" --db "$T/afile" create q >/dev/null 2>"$T/err"; rc=$?
check "create on a path that is a file: exit 3, saying so" bash -c "[ $rc = 3 ] && grep -q 'not a directory' '$T/err'"

# Values that look like options are never taken as global options or help.
DB2="$T/db2"
k2() { "$KVQ" --db "$DB2" "$@"; }
k2 create opts >/dev/null
k2 push opts -h >/dev/null 2>"$T/err"; rc=$?
check "push q -h: exit 2, nothing pushed" bash -c "[ $rc = 2 ] && grep -q -- '--' '$T/err' && [ \"\$('$KVQ' --db '$DB2' len opts)\" = 0 ]"
k2 push opts hello --db "$T/elsewhere" --json -h >/dev/null
check "push q v --db X: values, no database at X" bash -c "[ ! -e '$T/elsewhere' ] && [ \"\$('$KVQ' --db '$DB2' pop opts -n 9 | tr '\n' ,)\" = 'hello,--db,$T/elsewhere,--json,-h,' ]"
k2 push opts -- -h --help >/dev/null
check "push q -- -h: pushes -h" bash -c "[ \"\$('$KVQ' --db '$DB2' pop opts -n 9 | tr '\n' ,)\" = '-h,--help,' ]"
check "push --json q v: a global option before the values" bash -c "'$KVQ' --db '$DB2' push --json opts v | grep -q pushed"

# Exit codes, and read-only commands never create a database.
mkdir "$T/notdb"
for c in "len q" "list q" "peek q" "queues" "stats q" "watch q --timeout 10" "pop q" "push q v"; do
    "$KVQ" --db "$T/none" $c >/dev/null 2>&1; rc=$?
    "$KVQ" --db "$T/notdb" $c >/dev/null 2>&1; rc2=$?
    check "$c: no database: exit 4, nothing created" bash -c "[ $rc = 4 ] && [ $rc2 = 4 ] && [ ! -e '$T/none' ] && [ -z \"\$(ls -A '$T/notdb')\" ]"
done
"$KVQ" --db /proc/kvq-cannot/db create q >/dev/null 2>&1; rc=$?
check "a database path that cannot be created: exit 3" bash -c "[ $rc = 3 ]"
"$KVQ" --db "$T/no/such/parent" create q >/dev/null 2>"$T/err"; rc=$?
check "a missing parent directory: made, as mkdir -p would (issue 32)" bash -c "[ $rc = 0 ] && [ -e '$T/no/such/parent/kvq.marker' ]"
k2 pop opts -n 100 >/dev/null 2>&1
k2 pop opts >/dev/null 2>&1; rc=$?
check "empty queue: exit 1" bash -c "[ $rc = 1 ]"
k2 push opts x >/dev/null
k2 consume opts --drain --exec 'exit 7' >/dev/null 2>&1; rc=$?
check "consume --exec that fails: exit 5" bash -c "[ $rc = 5 ]"

# --json: one valid JSON value from every command, errors included; UTF-8 as it is, a value that
# is not UTF-8 as {"base64": ...}.
k2 create js >/dev/null
printf 'caf\xc3\xa9\n\xff\xferaw\n' | k2 push js
check "--json list: UTF-8 kept, invalid bytes recoverable (base64)" bash -c "'$KVQ' --db '$DB2' --json list js | python3 -c 'import json,sys,base64; v=json.load(sys.stdin); assert v[0]==\"caf\u00e9\", v; assert base64.b64decode(v[1][\"base64\"])==b\"\\xff\\xferaw\", v'"
"$KVQ" --db "$DB2" --json create 'we"ird\name' >"$T/j" 2>/dev/null
check "--json create escapes the name" bash -c "python3 -c 'import json,sys; v=json.loads(sys.stdin.read()); assert v[\"created\"]==\"we\\\"ird\\\\name\", v' < '$T/j'"
k2 create jd >/dev/null
for cmd in "len js" "peek js" "stats js" "queues" "len nosuch" "pop nosuch" "push" "create js" "frob" "pop js -n 5" "pop js" "receive js" \
           "clear jd" "delete jd" "delete jd" "" "--version" "demo --items 100 --producers 2 --consumers 1 --progress 1ms"; do
    "$KVQ" --db "$DB2" --json $cmd >"$T/j" 2>/dev/null
    check "--json $cmd: one JSON value" bash -c "python3 -c 'import json,sys; json.loads(sys.stdin.read())' < '$T/j'"
done
"$KVQ" --db "$DB2" --json demo --items 100 --producers 2 --consumers 1 >"$T/j" 2>/dev/null
check "--json demo: the summary as one object" bash -c "python3 -c 'import json,sys; v=json.loads(sys.stdin.read()); assert v[\"verified\"] is True and v[\"missing\"]==0 and v[\"items\"]==100, v' < '$T/j'"
"$KVQ" --db "$DB2" --json len nosuch >"$T/j" 2>/dev/null
check "--json no such queue: the message says so, naming it" bash -c "python3 -c 'import json,sys; v=json.loads(sys.stdin.read()); assert v[\"error\"][\"name\"]==\"no_such_queue\" and \"no queue named \\x27nosuch\\x27\" in v[\"error\"][\"message\"], v' < '$T/j'"
"$KVQ" --db "$T/none" --json len q >"$T/j" 2>/dev/null
check "--json with no database: a JSON error" bash -c "python3 -c 'import json,sys; v=json.loads(sys.stdin.read()); assert v[\"error\"][\"name\"]==\"no_database\", v' < '$T/j'"

# Durations take units; create is idempotent on request; alter changes the settings.
k2 create dur --lease 1m --max-deliveries 3 >"$T/j"
check "create --lease 1m: 60000 ms" grep -q 'lease 60000 ms, dead letter after 3 deliveries' "$T/j"
k2 create dur --lease 90 >/dev/null 2>&1; rc=$?
check "create of an existing queue: exit 2" bash -c "[ $rc = 2 ]"
k2 create dur --if-not-exists >/dev/null; rc=$?
check "create --if-not-exists of an existing queue: exit 0" bash -c "[ $rc = 0 ]"
k2 create dur --type fifo --if-not-exists >/dev/null 2>&1; rc=$?
check "create --if-not-exists with another type: exit 2" bash -c "[ $rc = 2 ]"
k2 alter dur --lease 500ms --max-deliveries 0 >"$T/j"
check "alter: new settings printed" grep -q 'lease 500 ms, max deliveries 0' "$T/j"
k2 push dur x
k2 receive dur >/dev/null
sleep 0.8
check "alter: receive takes the new lease (the item is back after 500ms)" bash -c "'$KVQ' --db '$DB2' receive dur | grep -q x"
for bad in "5x" "-1s" "1.5ms" "s" "1.s" ".5s"; do
    k2 push dur --delay "$bad" v >/dev/null 2>&1; rc=$?
    check "--delay '$bad': exit 2" bash -c "[ $rc = 2 ]"
done
k2 push dur --delay 2s later >/dev/null
check "--delay 2s: counted as delayed" bash -c "[ \"\$('$KVQ' --db '$DB2' --json stats dur | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"delayed\"])')\" = 1 ]"
k2 alter nosuch --lease 1s >/dev/null 2>&1; rc=$?
check "alter of a missing queue: exit 4" bash -c "[ $rc = 4 ]"

# The operator's view: queues with their counts, stats with every key, Prometheus, --watch.
DB3="$T/db3"
k3() { "$KVQ" --db "$DB3" "$@"; }
k3 create jobs >/dev/null; k3 create f --type fifo >/dev/null; k3 create 'we"ird' --type priority >/dev/null
k3 push jobs a b c; k3 push f x; k3 receive jobs >/dev/null
check "queues: a header and one line per queue with its counts" bash -c "'$KVQ' --db '$DB3' queues | awk 'NR==1 && \$1==\"NAME\" && \$7==\"OLDEST_AGE_S\" {h=1} \$1==\"jobs\" && \$3==2 && \$4==1 {j=1} \$1==\"f\" && \$4==\"-\" {f=1} END {exit !(h && j && f)}'"
check "--json queues: every key on every queue, null where it does not apply" bash -c "'$KVQ' --db '$DB3' --json queues | python3 -c '
import json,sys
v=json.load(sys.stdin)
c=[\"sent\",\"popped\",\"received\",\"acked\",\"requeued\",\"dead_lettered\",\"cleared\"]
keys={\"name\",\"type\",\"length\",\"in_flight\",\"delayed\",\"dead\",\"oldest_age_seconds\"}|set(c)|{k+\"_per_second\" for k in c}
assert all(set(q)==keys for q in v), v
f=[q for q in v if q[\"name\"]==\"f\"][0]; assert f[\"in_flight\"] is None and f[\"length\"]==1, f
j=[q for q in v if q[\"name\"]==\"jobs\"][0]; assert j[\"in_flight\"]==1 and j[\"sent\"]==3 and j[\"received\"]==1, j
'"
cat > "$T/prom_check.py" <<'PYEOF'
import re, sys
lines = sys.stdin.buffer.read().decode("utf-8").splitlines()  # strict: the format is UTF-8
samples = [l for l in lines if not l.startswith("#")]
assert "# TYPE kvq_queue_length gauge" in lines, lines
pat = re.compile(r'(kvq_[a-z_]+)\{queue="((?:[^"\\]|\\.)*)",type="[a-z]+"\} (\S+)')
for l in samples:
    m = pat.fullmatch(l)
    assert m, l
    float(m.group(3))
assert 'kvq_queue_length{queue="we\\"ird",type="priority"} 0' in samples, samples
assert 'kvq_queue_in_flight{queue="jobs",type="durable"} 1' in samples, samples
assert 'kvq_queue_length{queue="caf\u00e9 \ufffd",type="durable"} 0' in samples, samples
PYEOF
k3 create $'caf\xc3\xa9 \xff' >/dev/null
"$KVQ" --db "$DB3" stats --prometheus >"$T/prom" 2>/dev/null
check "stats --prometheus: HELP/TYPE and escaped labels, values parse" python3 "$T/prom_check.py" <"$T/prom"
# Five seconds for two refreshes a second apart: a busy machine may take seconds to start kvq.
timeout 5 "$KVQ" --db "$DB3" --json stats jobs --watch >"$T/watch" 2>/dev/null
check "stats --watch: refreshes every second, with rates after the first" bash -c "[ \$(wc -l < '$T/watch') -ge 2 ] && sed -n 2p '$T/watch' | python3 -c 'import json,sys; v=json.load(sys.stdin)[0]; assert v[\"sent_per_second\"] is not None, v'"

# Counters that mean one thing each: a nack is a requeue, not a second send.
k3 create cnt >/dev/null
k3 push cnt a b c
tok=$(k3 receive cnt | cut -f1); k3 nack cnt "$tok"
tok=$(k3 receive cnt | cut -f1); k3 ack cnt "$tok"
k3 pop cnt >/dev/null
check "stats: sent, popped, received, acked and requeued count apart" bash -c "'$KVQ' --db '$DB3' --json stats cnt | python3 -c 'import json,sys; v=json.load(sys.stdin); assert (v[\"sent\"],v[\"popped\"],v[\"received\"],v[\"acked\"],v[\"requeued\"],v[\"length\"])==(3,1,2,1,1,1), v'"

# Listing what is in flight and what is delayed; a listed token settles its item.
k3 create lst >/dev/null
k3 push lst one two
k3 receive lst >/dev/null
tok=$(k3 receive lst | cut -f1); k3 nack lst "$tok" --delay 1m
check "list --in-flight: token, seconds left, deliveries, value" bash -c "'$KVQ' --db '$DB3' list lst --in-flight | awk -F'\t' 'NR==1 && length(\$1)==88 && \$2>0 && \$2<=30 && \$3==1 && \$4==\"one\" {ok=1} END {exit !(ok && NR==1)}'"
check "list --delayed --json: due in about a minute" bash -c "'$KVQ' --db '$DB3' --json list lst --delayed | python3 -c 'import json,sys; v=json.load(sys.stdin); assert len(v)==1 and v[0][\"value\"]==\"two\" and 50<v[0][\"due_in_seconds\"]<=60, v'"
tok=$(k3 list lst --in-flight | cut -f1)
check "a token from list --in-flight acks its item" bash -c "'$KVQ' --db '$DB3' ack lst '$tok' && [ -z \"\$('$KVQ' --db '$DB3' list lst --in-flight)\" ]"
check "list: --in-flight with --limit is a usage error" bash -c "'$KVQ' --db '$DB3' list lst --in-flight --limit 2 2>/dev/null; [ \$? = 2 ]"

# Work queues: receive -n, ack of several tokens, receive --wait, dlq purge.
k3 create wq4 --max-deliveries 1 >/dev/null
k3 push wq4 a b c d
k3 receive wq4 -n 3 >"$T/r3"
check "receive -n 3: three items, one lease each" bash -c "[ \$(cut -f2 '$T/r3' | tr '\n' ,) = a,b,c, ] && [ \$(cut -f1 '$T/r3' | sort -u | wc -l) = 3 ]"
k3 ack wq4 $(cut -f1 "$T/r3") >/dev/null 2>&1; rc=$?
check "ack of three tokens: exit 0" bash -c "[ $rc = 0 ] && [ \"\$('$KVQ' --db '$DB3' --json stats wq4 | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"in_flight\"])')\" = 0 ]"
k3 ack wq4 $(cut -f1 "$T/r3") >/dev/null 2>"$T/ack.err"; rc=$?
check "ack of settled tokens: exit 1, each failure reported" bash -c "[ $rc = 1 ] && [ \$(grep -c 'failed' '$T/ack.err') = 3 ]"
# One token of a batch settles its item alone; the batch's other items stay in flight.
k3 create wq5 --max-deliveries 3 >/dev/null
k3 push wq5 p q r
k3 receive wq5 -n 3 >"$T/r5"
k3 ack wq5 "$(sed -n 2p "$T/r5" | cut -f1)" >/dev/null 2>&1; rc=$?
k3 nack wq5 "$(sed -n 1p "$T/r5" | cut -f1)" >/dev/null 2>&1; rc2=$?
check "batch token: ack of one item, nack of another" bash -c "[ $rc = 0 ] && [ $rc2 = 0 ] && [ \"\$('$KVQ' --db '$DB3' list wq5 --in-flight | cut -f4)\" = r ]"
check "batch token: the nacked item is ready again" bash -c "[ \"\$('$KVQ' --db '$DB3' receive wq5 | cut -f2)\" = p ]"
k3 ack wq5 "$(sed -n 2p "$T/r5" | cut -f1)" >/dev/null 2>"$T/ack5.err"; rc=$?
check "batch token: a second ack says settled" bash -c "[ $rc = 1 ] && grep -q already '$T/ack5.err'"
check "--json receive -n: an array" bash -c "'$KVQ' --db '$DB3' --json receive wq4 -n 5 | python3 -c 'import json,sys; v=json.load(sys.stdin); assert [x[\"value\"] for x in v]==[\"d\"], v'"
( sleep 0.5; "$KVQ" --db "$DB3" push wq4 late ) &
start=$(date +%s%N)
got=$("$KVQ" --db "$DB3" receive wq4 --wait 10s | cut -f2); rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
wait
# Woken by the push (at 0.5 s), not by the end of the 10 s wait; a busy machine may take seconds
# to start the pushing kvq.
check "receive --wait: woken by a push (in $took ms)" bash -c "[ '$got' = late ] && [ $took -lt 9000 ]"
"$KVQ" --db "$DB3" receive wq4 --wait 300ms >/dev/null 2>&1; rc=$?
check "receive --wait 300ms with nothing: exit 1" bash -c "[ $rc = 1 ]"
start=$(date +%s%N)
k3 push wq4 --delay 400ms due
line=$("$KVQ" --db "$DB3" receive wq4 --wait 10s); rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
got=$(printf '%s' "$line" | cut -f2)
check "receive --wait: a delayed item once it falls due (in $took ms)" bash -c "[ $rc = 0 ] && [ '$got' = due ] && [ $took -ge 400 ] && [ $took -lt 9000 ]"
k3 ack wq4 "$(printf '%s' "$line" | cut -f1)" >/dev/null
k3 push wq4 bad
t=$("$KVQ" --db "$DB3" receive wq4 | cut -f1)
k3 nack wq4 "$t"
check "dlq purge: deletes the dead letters and says how many" bash -c "[ \"\$('$KVQ' --db '$DB3' dlq purge wq4)\" = 1 ] && [ -z \"\$('$KVQ' --db '$DB3' dlq list wq4)\" ]"

# consume is at least once by default: a reader that goes away (head) loses nothing, and a
# poison item ends in the dead letters after create's default of 5 deliveries.
k2 create safe >/dev/null
seq 1 20 | k2 push safe
first=$("$KVQ" --db "$DB2" consume safe 2>"$T/head.err" | head -1)
check "consume | head -1: prints the first item" bash -c "[ '$first' = 1 ]"
check "consume | head -1: stops, saying why" bash -c "grep -q 'standard output was closed' '$T/head.err'"
check "consume | head -1: the other 19 are still there" bash -c "[ \"\$('$KVQ' --db '$DB2' len safe)\" = 19 ] && [ \"\$('$KVQ' --db '$DB2' pop safe -n 100 | sort -n | tr '\n' ,)\" = \"\$(seq 2 20 | tr '\n' ,)\" ]"
# A command whose output lost its reader (consume --exec CMD | head -1) fails for a reason that
# is not its item's: consume stops (exit 141) and gives the item back, instead of nacking every
# item until all are dead letters.
k2 create pipe >/dev/null
seq 1 20 | k2 push pipe
timeout 30 "$KVQ" --db "$DB2" consume pipe --exec 'cat; echo' 2>"$T/pe.err" | head -1 >"$T/pe.out"; rc=${PIPESTATUS[0]}
check "consume --exec CMD | head -1: exit 141, saying why" bash -c "[ $rc = 141 ] && grep -q 'standard output was closed' '$T/pe.err' && [ \"\$(cat '$T/pe.out')\" = 1 ]"
check "consume --exec CMD | head -1: nothing nacked or dead, the rest still there" bash -c "'$KVQ' --db '$DB2' --json stats pipe | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"dead\"]==0 and v[\"delayed\"]==0 and v[\"in_flight\"]==0 and v[\"length\"]+v[\"acked\"]==20 and v[\"length\"]>=17, v'"
# Ctrl-C of the process group: the command dies with kvq; its item goes back at once, and that
# is not a failed command.
k2 create intr >/dev/null
seq 1 50 | k2 push intr
setsid "$KVQ" --db "$DB2" consume intr --exec "v=\$(cat); sleep 0.2; echo \"\$v\" >> '$T/intr.out'" 2>"$T/intr.err" &
pi=$!
for _ in $(seq 1 100); do [ -s "$T/intr.out" ] && break; sleep 0.05; done
sleep 0.1
kill -INT -- -$pi
wait $pi; rc=$?
check "Ctrl-C of the process group: exit 130, the interrupted item given back at once" bash -c "[ $rc = 130 ] && grep -Eq ' [12] given back unread' '$T/intr.err' && '$KVQ' --db '$DB2' --json stats intr | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v[\"delayed\"]==0 and v[\"length\"]+v[\"acked\"]==50, v'"
check "Ctrl-C of the process group: acked + left = all, once" bash -c "cat '$T/intr.out' <('$KVQ' --db '$DB2' pop intr -n 100) | sort -n | diff - <(seq 1 50) >/dev/null"
# --at-most-once: a failed command loses its own item only, not the rest of its batch; a closed
# output stops every worker before it pops again.
k2 create amo >/dev/null
seq 1 30 | k2 push amo
k2 consume amo --at-most-once --batch 10 --drain --exec "v=\$(cat); [ \"\$v\" != 5 ] || exit 1; echo \"\$v\" >> '$T/amo.out'" 2>/dev/null; rc=$?
check "consume --at-most-once: a failed command loses only its item (exit 5)" bash -c "[ $rc = 5 ] && sort -n '$T/amo.out' | diff - <(seq 1 30 | grep -vx 5) >/dev/null"
# Values of 4,000 bytes, so that the pipe holds a few of them at most: the consumer blocks on a
# full pipe until head exits, whatever the machine's load, and then stops before it pops again.
awk 'BEGIN { s = sprintf("%3996s", ""); gsub(/ /, "x", s); for (i = 1; i <= 200; i++) printf "%04d%s\n", i, s }' | k2 push amo
"$KVQ" --db "$DB2" consume amo --at-most-once --batch 10 2>/dev/null | head -1 >/dev/null; rc=${PIPESTATUS[0]}
check "consume --at-most-once | head -1: exit 141, not batch after batch lost" bash -c "[ $rc = 141 ] && [ \"\$('$KVQ' --db '$DB2' len amo)\" -ge 150 ]"
k2 create poison >"$T/create.out"
check "create prints the lease and max deliveries" grep -q 'lease 30000 ms, dead letter after 5 deliveries' "$T/create.out"
k2 push poison bad
for _ in 1 2 3 4 5 6; do
    k2 consume poison --drain --nack-delay 0 --exec 'exit 1' >/dev/null 2>&1
done
check "a poison item is dead-lettered after 5 deliveries" bash -c "'$KVQ' --db '$DB2' dlq list poison | grep -q bad && [ \"\$('$KVQ' --db '$DB2' len poison)\" = 0 ]"
k2 consume poison --at-most-once --batch 3 --drain >/dev/null 2>&1; rc=$?
check "consume --at-most-once: allowed on durable queues" bash -c "[ $rc = 0 ]"

# Test knobs live in kvq/testing.h alone: no other public header, nor the umbrella kvq.h,
# declares injected faults or KVQ_TEST_* flags.
INC="$(cd "$(dirname "$0")/../../include/kvq" && pwd)"
check "public headers: no test knobs outside kvq/testing.h" bash -c "cd '$INC' && [ -f testing.h ] && ! grep -nE 'KVQ_TEST_|KVQ_FAULT_|fault_(rate|kinds|seed)|test_flags|#include.*testing' \$(ls *.h | grep -vx testing.h)"

# The demo runs and verifies (small).
check "demo verifies exactly once" bash -c "'$KVQ' --db '$T/demo' demo --items 2000 --producers 4 --consumers 2 | grep -q 'every item consumed exactly once'"
check "demo --progress: progress lines while it runs" bash -c "'$KVQ' --db '$T/demo' demo --items 2000 --producers 4 --consumers 2 --progress 1ms | grep -Eq '^ +[0-9.]+ s: [0-9]+ of 2000 pushed, [0-9]+ consumed$'"
check "demo --progress 0: none" bash -c "! '$KVQ' --db '$T/demo' demo --items 200 --producers 2 --consumers 1 --progress 0 | grep -q ' pushed, '"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
