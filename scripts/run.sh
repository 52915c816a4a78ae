#!/usr/bin/env bash
# Installs what is needed, builds Corvid (Release) and starts the server on
# its defaults: data in ./corvid-data, listening on 127.0.0.1:8080.
# Extra arguments go to `corvid serve` (e.g. --listen 0.0.0.0:9000).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$root/build" --target corvid
exec "$root/build/corvid" serve "$@"
