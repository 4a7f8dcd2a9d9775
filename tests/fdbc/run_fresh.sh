#!/bin/sh
# Runs a test against a fresh, empty directory served by libkvq_fdb_c.so.
# Usage: run_fresh.sh DIRECTORY COMMAND [ARGUMENTS...]
set -eu
dir=$1
shift
rm -rf "$dir"
mkdir -p "$dir"
KVQ_FDBC_DIR=$dir
export KVQ_FDBC_DIR
exec "$@"
