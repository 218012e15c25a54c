#!/usr/bin/env bash
# Evacuating a node, Ferry's way against KubeVirt's defaults re-created:
# the same four guests (two that converge only with most of the link, two
# easy ones) leave node a for node b over a link of --link-mibs (64 MiB/s),
# once by `ferryctl evacuate` (its plan's order, two slots, the link given
# to the migration nearest its switch-over) and once as KubeVirt would
# (two at once, the link split evenly, name order, 150 s/GiB then
# post-copy), both through Ferry's driver and proxy. Prints the total
# time, the longest guest pause and the migrations that failed or fell
# back to post-copy, side by side, with the ratio of the totals. About
# 5 minutes a run of each way. Arguments go to evacuatebench (--runs N,
# --link-mibs N).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/bed.sh
bed_up evacuatebench
bin/evacuatebench "$@"
