# Ferry: node-level live-migration agent for KVM hosts.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/ferry-vm/ferry/internal/version.Version=$(VERSION)
BIN := bin
E2E_TIMEOUT ?= 60m

.PHONY: support-fresh support-check support-update all build check test unit fuzz fuzz-short e2e e2e-stacks demo bench bench-policy bench-recovery bench-node bench-evacuate bench-data bench-proxy soak soak-short lint prepare clean testbed-down generate dashboard docs

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ferryd ./cmd/ferryd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ferryctl ./cmd/ferryctl
	$(GO) build -o $(BIN)/testbed ./test/testbed/cmd/testbed

# Installs libvirt + QEMU (bookworm-backports) and Prometheus + promtool
# (bookworm; binaries only, no service), and builds the guest kernel and
# initramfs into .cache/testbed; fast when already done.
prepare: build
	$(BIN)/testbed prepare

# golangci-lint (pinned in tools/go.mod, built on first use) enforces the
# import rules in .golangci.yml.
GOLANGCI := $(GO) tool -modfile=tools/go.mod golangci-lint

lint:
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/
	$(GO) vet -tags kube ./test/kube/...
	$(GO) vet -tags testbed_live ./test/testbed/
	$(GOLANGCI) run ./...

# A contributor's quick check: no root, no apt, nothing installed. Tests
# that need a tool or root that is missing skip and say which; Go's test
# cache keeps a warm run to what changed. -trimpath keeps the build cache
# good for every clone of the tree: without it a second clone, at another
# path, builds every package again.
check: lint
	$(GO) test -race -trimpath ./...
	@$(MAKE) --no-print-directory fuzz-short

unit:
	$(GO) test -race -count=1 ./...

# Every parser of what a neighbour sends: libvirt packets, a peer's domain
# XML, the proxy's headers, mark files. A short run of each in make test, a
# long one in make fuzz; a crasher lands in the package's testdata/fuzz and
# becomes a regression test.
FUZZ_TARGETS := libvirtx:FuzzCheckPacket libvirtx:FuzzReplyDecodedByGoLibvirt libvirtx:FuzzIncomingXML peer:FuzzReadHeader proxy:FuzzControlRequest daemon:FuzzDebugAPI migration:FuzzLedgerLoad migration/kubevirt:FuzzStoreLoad migration/kubevirt:FuzzVMIObject
FUZZTIME ?= 5m
# The short run counts executions: a wall-clock -fuzztime can end in Go's
# own "context deadline exceeded" with nothing found (golang/go#75804).
FUZZ_SHORT ?= 5000x

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in ./$${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -trimpath -run='^$$' -fuzz="^$${t#*:}$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=10s ./$${t%%:*}; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SHORT)

# Real libvirt daemons and QEMU guests in two network namespaces, and a real
# etcd + kube-apiserver on loopback (built from the Go module proxy on first
# use, cached after); serial.
e2e: prepare
	$(GO) test -count=1 -v -run Promtool ./deploy/
	$(GO) test -count=1 -tags testbed_live -run TestLive -v -timeout 10m ./test/testbed/
	$(GO) test -count=1 -tags kube -v -timeout 30m ./test/kube/...
	FERRY_SUPPORT_DIR="$(SUPPORT_DIR)" $(GO) test -count=1 -tags e2e -p 1 -v -timeout $(E2E_TIMEOUT) ./test/e2e/ 2>&1 | tee e2e.out; exit $${PIPESTATUS[0]}

# The core of the end-to-end suite on other libvirt and QEMU stacks
# (test/testbed/stack.go, docs/support.md): on trixie-backports' libvirt 12.9
# and QEMU 11.1 on both nodes, and between it and Debian 12's libvirt 9.0 and
# QEMU 7.2, a migration each way (of an idle guest: QEMU 7.2 under TCG
# corrupts a busy one now and then, see docs/support.md), and post-copy
# into it, broken and resumed.
E2E_CORE := TestIdleGuestMigratesAndBothNodesRecordIt|TestPostCopyInWhereTheHostDeniesUserfaultfd|TestMultifdWithPostCopyIsRefusedByName|TestDirtyRateMatchesWhatTheGuestReports|TestMigrationsThroughFerrysProxy|TestPostCopySwitchThenCompleted|TestPostCopyFailureIsReportedOnBothNodes|TestPostCopyResumesAfterALinkCut|TestPostCopyResetTwiceIsResumedTwice|TestPostCopyResumedAfterAFerrydIsKilled|TestSourceFerrydKilledMidPreCopyLeavesOneGuest|TestTargetFerrydKilledMidPreCopyLeavesOneGuest|TestPersistentDomainMovesItsDefinition
E2E_MIXED := TestIdleGuestMigratesAndBothNodesRecordIt|TestMultifdIntoAQEMUBefore8IsRefusedByName
# Into QEMU 7.2 only: out of it under TCG a guest is now and then
# corrupted (docs/support.md), which no test may leave to chance.
E2E_INTO_OLDEST := TestPostCopySwitchThenCompleted|TestPostCopyInWhereTheHostDeniesUserfaultfd|TestPostCopyFailureIsReportedOnBothNodes|TestPostCopyResumesAfterALinkCut
e2e-stacks: prepare
	FERRY_SUPPORT_DIR="$(SUPPORT_DIR)" FERRY_BED_STACKS=newest $(GO) test -count=1 -tags e2e -p 1 -v -timeout 20m -run '^($(E2E_CORE))$$' ./test/e2e/
	FERRY_SUPPORT_DIR="$(SUPPORT_DIR)" FERRY_BED_STACKS=a=newest,b=oldest $(GO) test -count=1 -tags e2e -p 1 -v -timeout 15m -run '^($(E2E_MIXED)|$(E2E_INTO_OLDEST))$$' ./test/e2e/
	FERRY_SUPPORT_DIR="$(SUPPORT_DIR)" FERRY_BED_STACKS=a=oldest,b=newest $(GO) test -count=1 -tags e2e -p 1 -v -timeout 10m -run '^($(E2E_MIXED))$$' ./test/e2e/

# prepare first: the unit tests of ferryctl's completion run real bash and
# zsh, and promtool checks deploy/'s rules; prepare installs them.
# make test installs every tool and runs as root: a test that needs one
# fails where it is missing, instead of skipping (see internal/testenv).
test: export FERRY_REQUIRE_ALL := 1
test: prepare lint unit fuzz-short support-fresh e2e e2e-stacks support-check soak-short

# make test's soak: 5 minutes of one fixed schedule, so that a change that
# breaks it breaks it every time (make soak draws a new one each run).
SOAK_SHORT_SEED := 42
soak-short:
	@$(MAKE) --no-print-directory soak SOAK_DURATION=5m SOAK_SEED=$(SOAK_SHORT_SEED)

# docs/support.md's matrix of stacks and features: each end-to-end test
# that passed records what it showed (test/support) into SUPPORT_DIR;
# make test starts it afresh and then compares it with docs/support.json,
# which the matrix is rendered from. After a run that rightly changed a
# cell: make support-update (then commit docs/support.json and .md).
SUPPORT_DIR := $(CURDIR)/build/support
support-fresh:
	rm -rf "$(SUPPORT_DIR)"

support-check:
	$(GO) run ./test/support/supportcheck "$(SUPPORT_DIR)"

support-update:
	$(GO) run ./test/support/supportcheck -update "$(SUPPORT_DIR)"
	FERRY_UPDATE_DOCS=1 $(GO) test -count=1 -run 'SupportDocIsCurrent' ./docs/

demo: prepare
	test/demo.sh

# Tracker and scrape cost; the proxy against raw TCP, socat and a
# KubeVirt-style relay; real migrations through Ferry against socat.
# The convergence policies have their own, longer run: make bench-policy.
bench: build
	test/bench/run.sh
	test/bench/proxy.sh
	test/bench/hostile.sh
	test/bench/migration.sh
	test/bench/data.sh

# Ferry's convergence policy against libvirt's defaults and KubeVirt's
# classic monitor on a matrix of real guests, repeated (about 35 minutes).
bench-policy: build
	test/bench/policy.sh

# Ferry's post-copy recovery timed on real migrations against the same
# migration unbroken: streams reset, and the link cut past the proxy's TCP
# user timeout (15-30 minutes).
bench-recovery: build
	test/bench/recovery.sh

# What a node full of KubeVirt launchers costs ferryd: CPU, memory,
# descriptors, goroutines and libvirt calls at 0 to 40 idle guests, the
# time to see a new launcher and to scrape, fitted per launcher (6 minutes).
bench-node: build
	test/bench/node.sh

# Evacuating a node: Ferry's scheduler against KubeVirt's defaults.
bench-evacuate: build
	test/bench/evacuate.sh

# The proxy alone: 1 GiB through each relay, with throughput and CPU per GiB.
bench-proxy:
	test/bench/proxy.sh

# Data settings over a slow link: KubeVirt's against Ferry's choice.
bench-data: build
	test/bench/data.sh

# Guests that check their own memory migrated back and forth through Ferry
# without pause, a fault every 20-60 s of migrating (seeded), the
# invariants checked against libvirt on both nodes after each:
# make soak SOAK_SEED=N SOAK_DURATION=10m replays a run (test/soak).
SOAK_DURATION ?= 5m
soak: build
	SOAK_SEED="$(SOAK_SEED)" SOAK_DURATION="$(SOAK_DURATION)" test/soak/soak.sh

# Everything generated from the code, by one path: docs/flags.md (ferryd's
# flags), docs/ferryctl.md (ferryctl's commands), docs/api.md (the debug
# API's routes), docs/metrics.md (package metrics) and
# deploy/grafana-dashboard.json (deploy/dashboard). Each test named
# *DocIsCurrent fails while its file is stale and writes it under
# FERRY_UPDATE_DOCS=1.
generate:
	FERRY_UPDATE_DOCS=1 $(GO) test -count=1 -run 'DocIsCurrent' ./...

docs dashboard: generate

testbed-down: build
	$(BIN)/testbed down

clean:
	rm -rf $(BIN) e2e.out
