#!/usr/bin/env bash
# Ferry's post-copy recovery, timed on real migrations: a guest that checks
# its own memory is migrated a -> b through Ferry's proxy, its post-copy
# broken 1 s in, and Ferry left to resume it. Two ways to break it: reset
# (every proxy connection gets a RST; the path is back at once; 5 runs)
# and cut (the link down 45 s, past the proxy's 30 s TCP user timeout;
# 3 runs). Prints per run the time from the path's return to the resume
# and to the guest running again, the whole pause, and the median of the
# latter against the 2 s goal; a run that does not complete with the
# guest's memory whole is reported failed. 10-20 minutes (1-2 a run).
# Arguments go to recoverybench (e.g. --scenarios reset, --runs-reset 3,
# --runs-cut 1, --cut-hold 60s). BENCH_LOGS=DIR copies the bed's daemon
# and guest logs there at the end; BENCH_JSON=FILE writes the settings and
# every run's figures and job events.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/bed.sh
bed_up recoverybench
bin/recoverybench ${BENCH_JSON:+--json "$BENCH_JSON"} "$@"
