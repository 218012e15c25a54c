#!/usr/bin/env bash
# make demo: two nodes, a guest dirtying memory, a live migration from a to b
# watched live by ferryctl, the final summary from both nodes, tear-down.
set -euo pipefail
cd "$(dirname "$0")/.."
TB=bin/testbed
CTL=bin/ferryctl
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

trap 'say "tearing the test bed down"; $TB down' EXIT
say "starting two nodes (libvirtd + ferryd each, in their own network namespaces)"
$TB up --ferryd bin/ferryd
eval "$($TB env)"

say "guest 'demo' on node a: 512 MiB, dirtying 256 MiB at 64 MiB/s"
$TB guest start demo --node a --memory-mib 512 --dirty-mib 256 --dirty-rate-mibs 64
$CTL --socket "$FERRY_A_DEBUG_SOCKET" domains

say "live migration a -> b, driven by ferryd on a through Ferry's mTLS proxy (capped at 96 MiB/s so there is something to watch)"
echo "\$ ferryctl migrate demo --to $FERRY_B_PROXY --to-node b --bandwidth-mibs 96"
$CTL --socket "$FERRY_A_DEBUG_SOCKET" migrate demo --to "$FERRY_B_PROXY" --to-node b --bandwidth-mibs 96

say "what ferryd on node a (source) recorded"
$CTL --socket "$FERRY_A_DEBUG_SOCKET" job demo
say "what ferryd on node b (target) recorded"
$CTL --socket "$FERRY_B_DEBUG_SOCKET" job demo
say "the guest, still dirtying memory on node b"
grep -a rate= "$FERRY_TESTBED_DIR/b/run/consoles/console-demo.log" | tail -3
