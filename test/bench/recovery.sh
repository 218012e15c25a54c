#!/usr/bin/env bash
# Ferry's post-copy recovery, timed on real migrations: a guest that checks
# its own memory is migrated a -> b through Ferry's proxy, post-copy capped
# at 8 MiB/s. Three scenarios, in this order: none (the baseline: the same
# migration never broken, its figures timed from the moment the others
# break; as many runs as reset), reset (1 s into post-copy every proxy
# connection gets a RST; the path is back at once; 5 runs) and cut (the
# link down 45 s, past the proxy's 30 s TCP user timeout; 3 runs); Ferry
# resumes the broken ones. Prints a table per scenario: per run the time
# from the path's return to the job's resumed event ("resumed") and to the
# guest's next console line ("running again"), the whole pause and the
# migration's total time. Then per broken scenario: the median "resumed"
# against the 2 s goal (the time the guest waits on the recovery itself),
# and the medians of "running again" and of the total time next to the
# unbroken baseline's, with the ratio and the difference (in post-copy the
# guest waits on every page still on the source, so its console lags even
# unbroken: the difference is what the break cost). A run that does not
# complete with the guest's memory whole is reported failed. Each broken
# scenario runs once per route (--routes libvirt,monitor, the default):
# libvirt's own resume protocol, and Ferry's QMP monitor of the target
# QEMU (node a's ferryd restarted with --postcopy-resume between them),
# each run saying which the target's libvirt shows, and the two compared
# side by side; FERRY_BED_STACKS=newest runs it where libvirt's own route
# works (the default stack's libvirt 11.3 has only the monitor's).
# 25-50 minutes (1-2 a run). Arguments go to recoverybench (e.g.
# --scenarios none,reset, --routes libvirt, --runs-reset 3, --runs-none 3,
# --runs-cut 1, --cut-hold 60s).
# BENCH_LOGS=DIR copies the bed's daemon and guest logs there at the end;
# BENCH_JSON=FILE writes the settings, every run's figures and job events
# (the baseline's too) and the comparisons.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/bed.sh
bed_up recoverybench
bin/recoverybench ${BENCH_JSON:+--json "$BENCH_JSON"} "$@"
