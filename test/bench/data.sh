#!/usr/bin/env bash
# Data settings over a slow link: KubeVirt's (multifd on 8 channels, no
# compression) against Ferry's choice (compression auto), both through
# Ferry's driver and proxy, for a guest whose pages compress and one whose
# pages are random, over the bed's veth held to --link-mibs (30 MiB/s) by
# a token bucket. Prints medians side by side: time, bytes on the wire,
# the source QEMU's CPU, the guest's pause. About 8 minutes. Arguments go
# to databench (--runs N, --link-mibs N, --dirty-rate-mibs N).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/bed.sh
bed_up databench
bin/databench "$@"
