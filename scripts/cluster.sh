#!/usr/bin/env bash
# A local three-node cluster (docs/cluster.md): installs what is needed,
# builds Corvid, starts three nats-servers (JetStream on, routes on
# loopback) and three Corvid nodes on 127.0.0.1:8081-8083, with everything
# under ./corvid-cluster/. Prints the URLs; Ctrl-C stops all of them.
# Extra arguments go to every `corvid serve` (e.g. --api-key KEY).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" --target corvid
dir=${CORVID_CLUSTER_DIR:-./corvid-cluster}
mkdir -p "$dir"
pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping the cluster..."
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT

for i in 1 2 3; do
  routes=""
  for j in 1 2 3; do
    [ "$j" = "$i" ] || routes="$routes${routes:+,}nats://127.0.0.1:$((6221 + j))"
  done
  nats-server -a 127.0.0.1 -p $((4221 + i)) -js -sd "$dir/nats$i" -n "nats$i" --cluster_name corvid \
    --cluster "nats://127.0.0.1:$((6221 + i))" --routes "$routes" >"$dir/nats$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  "$root/build/corvid" serve --data "$dir/node$i" --listen "127.0.0.1:$((8080 + i))" \
    --nats "nats://127.0.0.1:$((4221 + i)),nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224" \
    --node-id "n$i" --advertise "http://127.0.0.1:$((8080 + i))" "$@" >"$dir/node$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  for _ in $(seq 1 100); do
    grep -q "corvid listening" "$dir/node$i.log" 2>/dev/null && break
    sleep 0.3
  done
done
echo "Corvid cluster (logs and data in $dir):"
for i in 1 2 3; do echo "  node n$i: http://127.0.0.1:$((8080 + i))"; done
echo "  state:  curl http://127.0.0.1:8081/admin/cluster"
echo "Ctrl-C stops all six processes."
wait
