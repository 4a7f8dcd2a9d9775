#!/usr/bin/env bash
# Test of scripts/setup.sh against package locks held by another apt-get: setup must wait for
# them, say so, and then install; with a short KVQ_APT_LOCK_TIMEOUT and a lock never released it
# must fail with a message instead of waiting forever.
#
# It runs setup.sh over stand-ins for dpkg-query (every package missing), apt-get, fuser and
# sudo, so that nothing is installed. The apt-get stand-in behaves as apt 2.x does: "update"
# fails at once while the package lists are locked (it does not wait, whatever the options);
# "install" fails at once while the dpkg lock is held, unless given DPkg::Lock::Timeout, with
# which it waits up to that many seconds.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
stub="$tmp/bin"
mkdir -p "$stub"
export KVQ_STUB_STATE="$tmp"

cat >"$stub/dpkg-query" <<'STUB'
#!/usr/bin/env bash
echo -n "unknown ok not-installed"
STUB
cat >"$stub/sudo" <<'STUB'
#!/usr/bin/env bash
exec "$@"
STUB
cat >"$stub/fuser" <<'STUB'
#!/usr/bin/env bash
[ -e "$KVQ_STUB_STATE/dpkg.lock" ]
STUB
cat >"$stub/apt-get" <<'STUB'
#!/usr/bin/env bash
s="$KVQ_STUB_STATE"
echo "$*" >>"$s/calls.log"
timeout=0
verb=""
while [ $# -gt 0 ]; do
    case "$1" in
    -o) case "$2" in DPkg::Lock::Timeout=*) timeout="${2#*=}" ;; esac; shift 2 ;;
    update | install) verb="$1"; shift ;;
    *) shift ;;
    esac
done
if [ "$verb" = update ]; then
    if [ -e "$s/lists.lock" ]; then
        echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"
        echo "E: Unable to lock directory /var/lib/apt/lists/"
        exit 100
    fi >&2
    echo update >>"$s/done.log"
    exit 0
fi
waited=0
while [ -e "$s/dpkg.lock" ]; do
    if [ "$waited" -ge "$timeout" ]; then
        echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4243 (apt-get)" >&2
        exit 100
    fi
    sleep 1
    waited=$((waited + 1))
done
echo install >>"$s/done.log"
STUB
chmod +x "$stub"/*

fail() {
    echo "FAIL: $*"
    echo "--- setup's output:"
    cat "$tmp/out" || true
    echo "--- apt-get calls:"
    cat "$tmp/calls.log" || true
    exit 1
}

# 1. Both locks held, released after 2 and 4 s: setup waits, says so, and installs.
touch "$tmp/lists.lock" "$tmp/dpkg.lock"
(sleep 2 && rm -f "$tmp/lists.lock" && sleep 2 && rm -f "$tmp/dpkg.lock") &
releaser=$!
rc=0
PATH="$stub:$PATH" bash "$root/scripts/setup.sh" >"$tmp/out" 2>&1 || rc=$?
wait "$releaser"
[ "$rc" = 0 ] || fail "setup exited $rc while another apt-get held the locks for a few seconds"
grep -q "package lists are locked" "$tmp/out" || fail "no message about the lists lock"
grep -q "holds the dpkg lock" "$tmp/out" || fail "no message about the dpkg lock"
[ "$(cat "$tmp/done.log")" = "$(printf 'update\ninstall')" ] || fail "update then install did not both run"
echo "setup_lock: waited for both locks and installed"

# 2. A lock never released and a 2 s limit: setup gives up with the error, and says why.
rm -f "$tmp/done.log" "$tmp/calls.log"
touch "$tmp/dpkg.lock"
rc=0
start=$SECONDS
KVQ_APT_LOCK_TIMEOUT=2 PATH="$stub:$PATH" bash "$root/scripts/setup.sh" >"$tmp/out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "setup succeeded although the dpkg lock was never released"
grep -q "Could not get lock /var/lib/dpkg/lock-frontend" "$tmp/out" || fail "apt-get's error not shown"
((SECONDS - start < 60)) || fail "setup waited far longer than KVQ_APT_LOCK_TIMEOUT"
[ ! -e "$tmp/done.log" ] || grep -qv install "$tmp/done.log" || fail "installed under a held lock"
echo "setup_lock: gave up after the lock timeout (exit $rc)"
