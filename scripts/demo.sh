#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds kvq and runs its main job: the demo (producers and
# consumers on a durable queue of the embedded engine, verified exactly-once).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "kvq demo: checking the build's Debian packages (installs what is missing)"
bash scripts/setup.sh
echo "kvq demo: configuring and building kvq in ./build (about a minute)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVQ_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "kvq demo: running ./build/kvq --db ./kvq-data demo"
./build/kvq --db ./kvq-data demo
echo
echo "kvq is built at $PWD/build/kvq. To run it as 'kvq':"
echo "  export PATH=\"$PWD/build:\$PATH\"       (this shell), or"
echo "  sudo cmake --install build             (to /usr/local: the command, library, headers, kvq.pc)"
