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
seq 1 5000 | k push s
"$KVQ" --db "$DB" pop s -n 5000 2>"$T/err" | head -1 >/dev/null; rc=${PIPESTATUS[0]}
lost=$(sed -n 's/.*: \([0-9]*\) popped items* w.*/\1/p' "$T/err")
check "pop | head -1: exit 141, the lost items counted" bash -c "[ $rc = 141 ] && [ -n '$lost' ] && [ '$lost' -ge 1 ]"
check "pop | head -1: left + written + lost = 5000, and no more popped than one transaction" bash -c "l=\$('$KVQ' --db '$DB' len s); w=\$(sed -n 's/.*(\([0-9]*\) written before).*/\1/p' '$T/err'); [ \$((l + w + $lost)) = 5000 ] && [ \$l -ge 3000 ]"
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

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
