#!/usr/bin/env bash
# Tracker cost and scrape latency, side by side: each benchmark's figures as
# a ratio to the smallest case of the same benchmark in this same run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCHTIME=${BENCHTIME:-1s}
out=$(go test -run '^$' -bench 'ApplySample|Snapshot|Scrape|CgroupCPURead' -benchmem -benchtime "$BENCHTIME" ./migration ./metrics ./libvirtx)
echo "$out" | grep -E '^(goos|goarch|cpu):' | sort -u
echo
echo "$out" | awk '
/^Benchmark/ {
  split($1, p, "/"); name = p[1]; sub(/-[0-9]+$/, "", p[2]); cas = p[2]
  ns = $3; bytes = $5; allocs = $7
  if (!(name in base)) { base[name] = ns; order[++n] = name }
  rows[name] = rows[name] sprintf("  %-12s %14.0f ns/op %10.1fx %12d B/op %9d allocs/op\n", cas, ns, ns / base[name], bytes, allocs)
}
END {
  for (i = 1; i <= n; i++) { printf "%s (ratio to the first case)\n%s\n", order[i], rows[order[i]] }
}'
