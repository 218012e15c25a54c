#!/usr/bin/env bash
# What a node full of KubeVirt launchers costs ferryd. Node a's ferryd is
# restarted to watch KubeVirt's launcher sockets under the kubelet's pods
# directory (--libvirt-socket-glob, as the DaemonSet's finds them), and
# virt-launcher pods are started there, each a session libvirt daemon as
# 107 with an idle 128 MiB guest (TCG where there is no KVM), up to each
# count of --launchers (0,10,20,40; ascending, the launchers of one count
# kept for the next; 40 is what a 2-core TCG machine holds: an idle TCG
# guest costs it ~5 % of a core). At each count, once ferryd lists every
# launcher, a 10 s settle and then a --window (30 s) read from the kernel
# for ferryd's PID: CPU as % of one core, RSS, open descriptors, threads;
# and from its /metrics, scraped on the node's loopback: goroutines and
# its libvirt calls per second (ferry_libvirt_calls_total), in all, per
# launcher and the top 3 operations. Then 20 scrapes of /metrics timed
# (median), and 3 launchers with no guest timed from their socket's
# appearing to ferryd's debug API listing them up (median), each stopped
# again. Prints a table of the counts, the machine's own load at each
# (what bounds the count), the cost per launcher and the ratio to the
# 0-launcher baseline of the same run, a least-squares line per figure
# read at 110 and 250 launchers, and the goals next to the figures at the
# largest count. About 6 minutes with the defaults on a 2-core TCG
# machine, most of it starting guests. Arguments go to nodebench (e.g.
# --launchers 0,5 --window 10s for a quick look, --launchers
# 0,10,30,60,110 where the machine holds them, --parallel 2, --probes 5,
# --memory-mib 256, -v for the bed's own lines). BENCH_LOGS=DIR copies the
# bed's daemon and guest logs there at the end; BENCH_JSON=FILE writes the
# settings, every count's figures, the lines and the goals.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/bed.sh
bed_up nodebench
bin/nodebench ${BENCH_JSON:+--json "$BENCH_JSON"} "$@"
