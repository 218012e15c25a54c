#!/usr/bin/env bash
# Runs the tests that need a real kube-apiserver (build tag "kube"), from the repo root.
# The first run builds kube-apiserver and etcd into test/kube/bin: 5-9 minutes on 2 cores
# with a cold Go build cache, hence the long timeout. Extra arguments go to go test,
# e.g. -run TestApply.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go test -tags kube -count=1 -timeout 30m -v "$@" ./test/kube/...
