#!/usr/bin/env bash
# Convergence policies side by side on real migrations: a matrix of guests
# (dirty rate well under, near, over and far over a 48 MiB/s cap; small and
# large working sets), each migrated under libvirt's defaults with
# KubeVirt's 150 s/GiB deadline (none), KubeVirt's classic monitor
# (kubevirt-legacy: post-copy at that deadline) and Ferry's policy in act
# mode, with and without post-copy (ferry, ferry-no-postcopy), taking turns.
# Prints the table and ferry / kubevirt-legacy of the median total times.
# Three runs of ferry and kubevirt-legacy, whose ratio is the point, and
# one of none and ferry-no-postcopy (in the first run): three of all four
# would take about 50 minutes on a 2-core TCG machine, this about 35.
# Arguments go to policybench and override those defaults (e.g.
# --cases small-hot,over, --runs 1, --once "" to repeat all four, or
# --policies none,kubevirt-legacy,ferry). BENCH_LOGS=DIR keeps the bed's
# daemon and guest logs there for a post-mortem; BENCH_JSON=FILE every
# migration's figures and lifecycle events (policybench --report FILE
# prints the tables again).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/bed.sh
bed_up policybench
bin/policybench --runs 3 --once none,ferry-no-postcopy ${BENCH_JSON:+--json "$BENCH_JSON"} "$@"
