#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds kvq and runs its main job: the demo (producers and
# consumers on a durable queue of the embedded engine, verified exactly-once).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVQ_WERROR=ON -DKVQ_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
./build/kvq --db ./kvq-data demo
