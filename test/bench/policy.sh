#!/usr/bin/env bash
# Convergence policies side by side on real migrations: a matrix of guests
# (dirty rate well under, near, over and far over a 48 MiB/s cap; small and
# large working sets), each migrated under libvirt's defaults with
# KubeVirt's 150 s/GiB deadline (none), KubeVirt's classic monitor
# (kubevirt-legacy: post-copy at that deadline) and Ferry's policy in act
# mode (ferry), in one run. Prints the table and ferry / kubevirt-legacy.
# Arguments go to policybench (e.g. --cases small-hot,over, or
# --policies none,kubevirt-legacy,ferry,ferry-no-postcopy).
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build
go build -o bin/policybench ./test/bench/policybench
trap 'bin/testbed down >/dev/null 2>&1 || true' EXIT
bin/testbed up --ferryd bin/ferryd >/dev/null
bin/policybench "$@"
