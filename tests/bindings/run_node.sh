#!/usr/bin/env bash
# Runs tests/bindings/node_smoke.js: FoundationDB's Node.js binding (npm `foundationdb`, whose
# prebuilt addon links libfdb_c.so) against a fresh kvq directory through libkvq_fdb_c.so.
# Needs node, npm and the npm registry; not run by CI (which has Debian's mirror only).
#
#   tests/bindings/run_node.sh BUILD_DIR [API_VERSION...]     (default versions: 620 710 720)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: run_node.sh BUILD_DIR [API_VERSION...]}" && pwd)"
shift
versions=("${@:-620 710 720}")
[[ -e "$build/fdbc/libfdb_c.so" ]] || { echo "no $build/fdbc/libfdb_c.so: build kvq first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$build/fdbc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The install script would build the addon from source when the prebuilt one cannot load yet;
# the prebuilt one loads once libfdb_c.so is on the library path, so no scripts are run.
(cd "$work" && npm install --ignore-scripts --no-audit --no-fund foundationdb@2.0.1 >/dev/null)
cp "$here/node_smoke.js" "$work/"
for v in ${versions[@]}; do
    rm -rf "$work/data"
    echo "kvq:$work/data" >"$work/kvq.cluster"
    echo "== API version $v"
    (cd "$work" && FDB_API_VERSION="$v" KVQ_CLUSTER_FILE="$work/kvq.cluster" timeout 60 node node_smoke.js)
done
