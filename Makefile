# better-compute: build, test, measure. Every target works on a fresh Debian machine
# with Go once `.ci/run` (or `make deps`) has installed the packages the tests use.

GO        ?= go
BIN       := bin
FUZZTIME  ?= 5000x
export CGO_ENABLED := 0

.PHONY: all build demo test test-go test-race fuzz bench lint deps clean ramdisk-test-image help

all: build

## help: this list: each target and what it does (from the `## target:` comments here)
help:
	@awk '/^## [a-z0-9-]+: / { name = $$2; sub(/:$$/, "", name); text = $$0; sub(/^## [a-z0-9-]+: /, "", text); printf "make %-19s %s\n", name, text }' $(firstword $(MAKEFILE_LIST))

## build: the two static binaries into bin/
build:
	$(GO) build -o $(BIN)/ ./better-compute ./bcd

## demo: the README's first command: a registry on an embedded store walked through, then (root) a VM provisioned end to end, told as numbered phases
demo: build
	./scripts/demo.sh

## test: the whole suite, as the README and CI run it: unit, loopback, fuzz seeds, the race detector, short fuzzing
test: deps test-go test-race fuzz

# AlonePackages hold tests that fill a table every network namespace shares (the host's
# neighbour table): they skip in the run of every package, and run here alone after it.
AlonePackages = ./boot/dhcp/

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./...
	BC_NETNS_ALONE=1 $(GO) test -count=1 -timeout 10m $(AlonePackages)

## test-race: every package's tests again under the race detector, of e2e/ only e2e/agentplane's (cgo, so gcc); 10 to 15 minutes on 2 shared cores
# The race detector needs cgo, which the static binaries go without. All packages outside e2e/
# run: as this target, 8 min 22 s of wall time on a 2-core machine shared with other work (load
# average 4 to 9); in ten groups one after the other, 13 min 15 s. CI's budget is 90 minutes. e2e/
# is left out: its tests drive the binaries as processes, which are built without the detector
# (what it would watch is mostly the harness), and e2e/vm boots VMs under qemu. The binaries
# testkit starts stay built without it: built with it, cli's tests took 540 s instead of 70 s and
# the registry's resident memory grew past the bounds the tests assert (827 MiB against 256 MiB).
# e2e/agentplane is the exception: its endpoints and agents run in the test's process (or in
# children re-executing the test binary, built with the detector too); 80 to 105 s more. Its two
# tests that start `serve` as a process run too: they pass under it, and one runs `bcd node`'s
# agent in the test's process.
test-race:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v /e2e/)
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m ./e2e/agentplane/

## fuzz: every fuzz target for FUZZTIME each: 5000 inputs (make fuzz FUZZTIME=5m for a long run)
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

## bench: each hot path against its named peer, with the ratio printed
bench:
	./scripts/bench.sh

## ramdisk: the PXE ramdisk (Debian kernel and modules, busybox, static bcd) into out/ramdisk/
.PHONY: ramdisk
ramdisk:
	./scripts/make-ramdisk.sh

## docs: docs/commands.md and the README's command table, generated from the command trees
.PHONY: docs man
docs:
	$(GO) run ./scripts/gendocs

## man: the man pages of better-compute and bcd, generated from the command trees, into out/man/
man:
	$(GO) run ./scripts/gendocs -man out/man

## lint: formatting, vet, and the import rules of docs/ARCHITECTURE.md
lint:
	@test -z "$$(gofmt -l .)" || (gofmt -l . && echo "gofmt: files above need formatting" && exit 1)
	$(GO) vet ./...
	$(GO) test -count=1 -run TestImportRules ./testkit/

## deps: the Debian packages the tests use
deps:
	./.ci/deps.sh

## e2e: the VM deployed end to end and booting its written disk under BIOS, UEFI and UEFI Secure Boot, the image under Secure Boot, walked through its lifecycle, its disks wiped in every mode, and its measured boot attested (root, qemu; builds `make ramdisk`), docs/e2e.md
.PHONY: e2e
e2e:
	$(GO) test -count=1 -v -timeout 40m -run '^(TestVMDeploy|TestVMDeployUEFI|TestVMDeploySecureBoot|TestVMImageSecureBoot|TestVMLifecycle|TestVMWipe|TestVMRamdiskExtra|TestVMMeasuredBoot)$$' ./e2e/vm/

## screenshots: the console's main pages (sign-in, nodes, a node deploying and deployed, sites) into docs/screenshots/, from a loopback deploy in headless Chromium
.PHONY: screenshots
screenshots:
	BC_SCREENSHOTS=$(CURDIR)/docs/screenshots $(GO) test -count=1 -v -run '^TestConsoleFollowsADeployLive$$' ./e2e/deploy/

## ramdisk-test-image: the kernel and busybox initramfs the VM boot test PXE-boots (cached)
ramdisk-test-image:
	./scripts/ramdisk-test-image.sh

## clean: remove bin/
clean:
	rm -rf $(BIN)
