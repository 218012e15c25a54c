#!/usr/bin/env bash
# make soak: guests that check their own memory migrate back and forth
# between the bed's nodes through Ferry without pause, a fault every 20 to
# 60 s of migrating (ferryd killed or restarted, libvirtd restarted, the
# link cut for 1-50 s, the proxies' streams reset), and after each the
# invariants, checked against libvirt on both nodes (see test/soak/main.go
# and test/bench/README.md, Soak). SOAK_SEED (default: the clock) fixes
# the faults and each migration's mode; SOAK_DURATION (default 5m) is about
# how long it runs. The seed is printed first, and a failing run prints the
# command that replays it. The bed comes up with ferryd and goes down at
# the end, however it ends; the daemons' and guests' logs are copied to
# SOAK_LOGS (default build/soak-logs) first. Arguments go to bin/soak
# (e.g. --guests 2, --settle-timeout 5m).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/bed.sh
seed=${SOAK_SEED:-$(date +%s%N)}
duration=${SOAK_DURATION:-5m}
echo "soak: seed $seed, duration $duration (replay: make soak SOAK_SEED=$seed SOAK_DURATION=$duration)"
export BENCH_LOGS=${SOAK_LOGS:-$PWD/build/soak-logs}
rm -rf "$BENCH_LOGS"
make -s build
go build -o bin/soak ./test/soak
trap bed_down EXIT
bin/testbed up --ferryd bin/ferryd >/dev/null
bin/soak --seed "$seed" --duration "$duration" "$@"
