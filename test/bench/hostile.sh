#!/usr/bin/env bash
# ferryd's resident memory at rest and under hostile connections on its
# proxy port, side by side (ratio to rest, against the 128 MiB goal).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go run ./test/bench/hostilebench "$@"
