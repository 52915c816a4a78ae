#!/usr/bin/env bash
# Installs every Debian 12 package Corvid needs to build, test and benchmark.
# Safe to run twice: apt-get skips what is already installed, and the package
# index is refreshed only when a package is actually missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config python3
  libboost1.74-dev libboost-system1.74-dev
  libicu-dev libroaring-dev libzstd-dev rapidjson-dev catch2 liblmdb-dev
  libstemmer-dev unicode-data libxxhash-dev
  libsqlite3-dev libxapian-dev wrk
  nats-server libnats-dev
  clang libclang-rt-14-dev
  libssl-dev openssl
  libcli11-dev
  chromium
)
# The browser test (tests/browser) runs on Node.js 20 (playwright-core
# needs it); Debian's nodejs is taken only where no node is installed.
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# playwright-core for the browser test, from the npm registry at the version
# package-lock.json pins (drives Debian's /usr/bin/chromium; downloads no browser).
browser_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
if [ ! -d "$browser_dir/node_modules/playwright-core" ] ||
   [ "$browser_dir/package-lock.json" -nt "$browser_dir/node_modules/.package-lock.json" ]; then
  (cd "$browser_dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi
