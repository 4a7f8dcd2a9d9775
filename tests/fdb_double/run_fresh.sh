#!/bin/sh
# Runs a test against a fresh, empty database of the fdb double.
# Usage: run_fresh.sh DIRECTORY COMMAND [ARGUMENTS...]
set -eu
dir=$1
shift
rm -rf "$dir"
mkdir -p "$dir"
KVQ_FDB_DOUBLE_DIR=$dir
export KVQ_FDB_DOUBLE_DIR
exec "$@"
