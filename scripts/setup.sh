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
)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
