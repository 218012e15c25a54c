#!/usr/bin/env bash
# Ferry's migration proxy against raw TCP, socat and a KubeVirt-style relay:
# a 2 GiB stream over a veth between two network namespaces of the bench's
# own (ferry-bench-a, ferry-bench-b), figures as ratios to baselines of the
# same run. Arguments go to proxybench: -runs N, -bytes 512MiB, -parallel N,
# -variants raw,ferry,..., -o json.
set -euo pipefail
cd "$(dirname "$0")/../.."
go build -o bin/proxybench ./test/bench/proxybench

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
cleanup() {
  # proxybench removes them itself; this covers it being killed outright.
  for ns in ferry-bench-a ferry-bench-b; do
    if [ -e "/run/netns/$ns" ]; then "${sudo[@]}" ip netns del "$ns" || true; fi
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"${sudo[@]}" bin/proxybench run "$@"
