#!/usr/bin/env bash
# Runs tests/bindings/python_smoke.py and python_recipes.py: FoundationDB's own Python binding, taken from a
# FoundationDB source tree (7.3), against a fresh kvq directory through libkvq_fdb_c.so. The
# binding's generated files (fdboptions.py from fdb.options, apiversion.py) are written into a
# scratch directory; nothing of FoundationDB's is kept. Not run by CI.
#
#   tests/bindings/run_python.sh FDB_SOURCE_TREE BUILD_DIR [API_VERSION...]   (default 710 730)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "${1:?usage: run_python.sh FDB_SOURCE_TREE BUILD_DIR [API_VERSION...]}" && pwd)"
build="$(cd "${2:?usage: run_python.sh FDB_SOURCE_TREE BUILD_DIR [API_VERSION...]}" && pwd)"
shift 2
versions=("$@")
((${#versions[@]})) || versions=(710 730)
[[ -e "$build/fdbc/libfdb_c.so" ]] || { echo "no $build/fdbc/libfdb_c.so: build kvq first" >&2; exit 2; }
[[ -d "$src/bindings/python/fdb" ]] || { echo "$src has no bindings/python/fdb" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$src/bindings/python/fdb" "$work/fdb"
python3 "$here/gen_fdboptions.py" "$src" "$work/fdb"
export LD_LIBRARY_PATH="$build/fdbc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for v in "${versions[@]}"; do
    rm -rf "$work/data"
    echo "kvq:$work/data" >"$work/kvq.cluster"
    echo "== API version $v"
    V="$v" FDB_PYTHON_DIR="$work" KVQ_CLUSTER_FILE="$work/kvq.cluster" timeout 120 python3 "$here/python_smoke.py"
    # The queue recipes through the binding, and kvq's FIFO and priority queues through its
    # command, on one fresh directory.
    rm -rf "$work/data"
    V="$v" FDB_PYTHON_DIR="$work" KVQ_CLUSTER_FILE="$work/kvq.cluster" KVQ_CLI="$build/kvq" \
        timeout 120 python3 "$here/python_recipes.py"
done
