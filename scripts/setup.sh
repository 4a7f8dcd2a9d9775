#!/usr/bin/env bash
# Installs the Debian packages kvq needs to build and test, if any are missing.
set -euo pipefail
# libclang-rt-dev: the sanitizer and libFuzzer runtimes, only "recommended" by clang, which
# --no-install-recommends below would otherwise leave out.
# python3: the command-line tests parse its --json output with it.
pkgs=(cmake make gcc clang libclang-rt-dev pkg-config libsqlite3-dev libcmocka-dev strace valgrind
      python3)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "kvq setup: installing ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
