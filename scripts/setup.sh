#!/usr/bin/env bash
# Installs the Debian packages kvq needs to build and test, if any are missing.
#
# Another apt-get or dpkg (unattended-upgrades, a second setup) may hold the package locks: then
# this waits for them, saying so, up to $KVQ_APT_LOCK_TIMEOUT seconds (default 600), instead of
# failing at once. apt-get install waits on the dpkg lock itself (DPkg::Lock::Timeout);
# apt-get update does not wait on the lock of the package lists, so it is tried again each
# second while that lock is held.
set -euo pipefail
# libclang-rt-dev: the sanitizer and libFuzzer runtimes, only "recommended" by clang, which
# --no-install-recommends below would otherwise leave out.
# python3: the command-line tests parse its --json output with it.
pkgs=(cmake make gcc clang libclang-rt-dev pkg-config libsqlite3-dev libcmocka-dev strace valgrind
      python3 python3-pytest)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "kvq setup: installing ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
    export DEBIAN_FRONTEND=noninteractive
    lock_timeout="${KVQ_APT_LOCK_TIMEOUT:-600}"
    case "$lock_timeout" in
    '' | *[!0-9]*)
        echo "kvq setup: KVQ_APT_LOCK_TIMEOUT must be a number of seconds" >&2
        exit 2
        ;;
    esac
    apt_opts=(-o "DPkg::Lock::Timeout=$lock_timeout")
    start=$SECONDS
    said=0
    while :; do
        rc=0
        out="$($SUDO apt-get "${apt_opts[@]}" update -qq 2>&1)" || rc=$?
        if [ "$rc" = 0 ]; then
            [ -z "$out" ] || printf '%s\n' "$out"
            break
        fi
        if ! grep -q 'Could not get lock' <<<"$out" || ((SECONDS - start >= lock_timeout)); then
            printf '%s\n' "$out" >&2
            echo "kvq setup: apt-get update failed (exit $rc)" >&2
            exit "$rc"
        fi
        if [ "$said" = 0 ]; then
            echo "kvq setup: the package lists are locked by another apt-get; waiting up to" \
                "${lock_timeout} s ($(grep -o 'held by process.*' <<<"$out" | head -n 1))"
            said=1
        fi
        sleep 1
    done
    if command -v fuser >/dev/null && $SUDO fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock \
        >/dev/null 2>&1; then
        echo "kvq setup: another apt-get or dpkg holds the dpkg lock; waiting up to" \
            "${lock_timeout} s for it"
    fi
    $SUDO apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
