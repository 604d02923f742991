#!/usr/bin/env bash
# Baton demo: what the bus does today. Builds the binaries, starts a registry-server on a fresh
# domain, a publisher and subscribers in separate processes (in a deliberately awkward order),
# kills and restarts the registry under them, shows the bus with bus-inspect, and cleans up.
# The full robot demo (manager, arbiters, simulator, applications) arrives with later issues.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p registry-server -p tools
bin=target/release
domain="demo-$$"
export BUS_DOMAIN="$domain"
pids=()
cleanup() {
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    # Slots outlive the registry by design; a demo leaves none behind.
    rm -f /dev/shm/baton."$domain"~* /dev/shm/baton."$domain"%* 2>/dev/null || true
}
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "A subscriber starts first, with no registry and no publisher (it binds later)"
"$bin/bus-stress" read --name /demo/status --seconds 12 --wait > "/tmp/$domain.reader" &
pids+=($!)
sleep 0.5
say "A publisher starts, still without a registry: it keeps its latest value until bound"
"$bin/bus-stress" write --name /demo/status --interval-ms 20 --min-size 16 --max-size 65536 &
pids+=($!)
sleep 0.5
say "The registry-server starts: it creates the slot, both endpoints bind"
"$bin/registry-server" &
reg=$!
pids+=($reg)
sleep 1
"$bin/bus-inspect" list
"$bin/bus-inspect" endpoints
say "The registry is killed with SIGKILL: the publisher and subscriber keep going"
kill -9 "$reg"
sleep 1
"$bin/bus-inspect" list
say "It restarts and adopts the existing slot"
"$bin/registry-server" &
pids+=($!)
sleep 1
"$bin/bus-inspect" endpoints
say "The current value, decoded from the schema stored in the slot (first 200 characters)"
"$bin/bus-inspect" get /demo/status --json | cut -c1-200
say "Waiting for the subscriber to finish its 12 s run; it checks every value it reads"
wait "${pids[0]}"
cat "/tmp/$domain.reader"
rm -f "/tmp/$domain.reader"
echo
echo "bad = 0 means no torn or corrupt value was ever read."
