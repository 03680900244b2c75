# completiond — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
# make run serves on ADDR: COMPLETIOND_ADDR when it is set (as the server
# itself would read it), else localhost:50051; make run ADDR=… wins over both.
ADDR  ?= $(or $(COMPLETIOND_ADDR),localhost:50051)

# Pinned tool versions; `make tools` installs them into ./bin with go install.
BUF_VERSION                ?= v1.75.0
PROTOC_GEN_GO_VERSION      ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.2
GRPCURL_VERSION            ?= v1.9.4
STATICCHECK_VERSION        ?= v0.8.2
BENCHSTAT_VERSION          ?= v0.0.0-20260908200009-22c9c6c9d4da
PROTOC_GEN_DOC_VERSION     ?= v1.5.1

TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-doc $(BIN)/grpcurl $(BIN)/staticcheck $(BIN)/benchstat

# VERSION is completiond's release version, as cmd/completiond/version.go
# declares it; make release-check holds everything else to it.
VERSION := $(shell sed -n 's/^const version = "\(.*\)"$$/\1/p' cmd/completiond/version.go)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help, with the values the variables have now.
	@echo 'Usage: make [TARGET] [VARIABLE=value ...]'
	@echo
	@echo 'Targets:'
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's|$$(ADDR)|$(ADDR)|g; s|$$(IMAGE)|$(IMAGE)|g' | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'
	@echo
	@echo 'Variables (now):'
	@$(foreach v,$(HELP_VARS),printf '  %-27s %s\n' '$(v)' '$($(v))';)
	@echo
	@echo 'Pinned tools (make tools installs them into ./bin):'
	@$(foreach v,$(TOOL_VERSIONS),printf '  %-27s %s\n' '$(v)' '$($(v))';)

# The variables make help shows, with their current values.
HELP_VARS     = VERSION ADDR GO PYTHON SOAK_N SOAK_SEED FUZZTIME BENCH BENCH_PKGS BENCH_COUNT BREAKING_REF IMAGE IMAGE_MODE DEST \
	LOADBENCH_LEVELS LOADBENCH_REPS LOADBENCH_OUT LOADBENCH_FLAGS FLEETBENCH_LEVELS FLEETBENCH_REPS FLEETBENCH_OUT FLEETBENCH_FLAGS
TOOL_VERSIONS = BUF_VERSION PROTOC_GEN_GO_VERSION PROTOC_GEN_GO_GRPC_VERSION PROTOC_GEN_DOC_VERSION GRPCURL_VERSION STATICCHECK_VERSION BENCHSTAT_VERSION HELM_VERSION \
	PROTOC_VERSION GRPC_PYTHON_PLUGIN_VERSION VALKEY_VERSION

.PHONY: run
run: ## Serve on $(ADDR) (ADDR, or COMPLETIOND_ADDR) with the embedded sim provider (no API key needed).
	$(GO) run ./cmd/completiond --addr '$(ADDR)'

.PHONY: build
build: ## Build bin/completiond.
	$(GO) build -buildvcs=auto -o $(BIN)/completiond ./cmd/completiond

# make test installs what the tests run before running them: redis-server
# (the fleet tests) and a C compiler (the race detector needs cgo), both
# Debian packages installed with apt-get when missing and make runs as root.
# go test's own output is the progress: neither piped nor filtered, so each
# package's line shows when go test prints it.
.PHONY: test
test: test-deps ## Run every test with the race detector (installs redis-server and a C compiler when missing).
	@echo 'make test: go test -race compiles every package first (quiet for minutes on two busy cores), then prints a line per package, in order'
	$(GO) test -race -count=1 -timeout 15m ./...

.PHONY: test-short
test-short: ## The fast majority of the tests: go test -short without the race detector, a line per package.
	$(GO) test -short -count=1 -timeout 10m ./...

.PHONY: test-deps
test-deps: redis-installed cc-installed ## Install what make test needs beyond Go: redis-server and a C compiler (apt-get, when missing).

.PHONY: cc-installed
cc-installed:
	@command -v "$$($(GO) env CC)" >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing gcc and libc6-dev with apt-get (go test -race needs a C compiler)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; \
		else echo "go test -race needs a C compiler: apt-get install gcc"; exit 1; fi; }

# make soak: the chaos soak of service/soak_test.go with SOAK_N completions
# (a run of 200 is part of make test), then the auth-on hostile soak of
# service/soak_hostile_test.go: SOAK_N completions by clients obeying
# RetryInfo at a key's rate limit while others send wrong keys and 8 MiB
# requests without a key. SOAK_SEED picks the chaos soak's requests.
SOAK_N    ?= 10000
SOAK_SEED ?= 1

.PHONY: soak
soak: ## Chaos soak (SOAK_N=10000 fault scripts) and hostile auth-on soak; reports goroutines, RSS and refusals.
	SOAK_N=$(SOAK_N) SOAK_SEED=$(SOAK_SEED) $(GO) test -run '^TestSoak(Hostile)?$$' -count=1 -timeout 30m -v ./service

# make fleet-chaos: cmd/completiond/fleet_chaos_test.go — three completiond
# processes on one redis-server, ten callers running resumable Streams and Sessions
# through them, while for CHAOS_FOR replicas are killed and started again,
# stopped past their lease, and Redis is restarted empty or paused; every
# completion's events are held to docs/fleet.md. Not part of make test (the
# test skips without COMPLETIOND_CHAOS_FOR). The run logs its seed;
# CHAOS_SEED=… replays that run's chaos.
CHAOS_FOR  ?= 60s
CHAOS_SEED ?=

.PHONY: fleet-chaos
fleet-chaos: test-deps ## Fleet chaos: 3 replicas and Redis killed, stopped, restarted at random for CHAOS_FOR (60s); CHAOS_SEED replays a run.
	COMPLETIOND_CHAOS_FOR=$(CHAOS_FOR) $(if $(CHAOS_SEED),COMPLETIOND_CHAOS_SEED=$(CHAOS_SEED)) $(GO) test -race -run '^TestFleetChaos$$' -count=1 -timeout 30m -v ./cmd/completiond/

# make fuzz: every fuzz target, found by go test -list '^Fuzz' (so that a
# new one is never left out), each for FUZZTIME (their seed corpora run in
# make test). FUZZ_PKGS narrows the packages. Minimizing an input that
# finds new coverage is capped, or the short runs would spend themselves
# minimizing.
FUZZTIME  ?= 30s
FUZZ_PKGS ?= ./...

# FUZZ_LIST prints package:FuzzName for each fuzz target of FUZZ_PKGS.
FUZZ_LIST = $(GO) test -run '^$$' -list '^Fuzz' $(FUZZ_PKGS) | \
	awk '/^Fuzz/ {names[n++] = $$1; next} /^ok/ {for (i = 0; i < n; i++) print $$2 ":" names[i]; n = 0}'

.PHONY: fuzz-list
fuzz-list: ## List every fuzz target (package:Fuzz…), as go test -list '^Fuzz' finds them.
	@set -o pipefail; $(FUZZ_LIST)

.PHONY: fuzz
fuzz: ## Run every fuzz target (make fuzz-list) for FUZZTIME (30s) each.
	@set -eo pipefail; targets=$$($(FUZZ_LIST)); \
	[ -n "$$targets" ] || { echo "fuzz: go test -list found no fuzz target"; exit 1; }; \
	echo "fuzz: $$(echo "$$targets" | wc -l) targets, $(FUZZTIME) each"; \
	for t in $$targets; do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x $$pkg; \
	done

# make release-check needs no tag (CI runs it on a clone without tags): it
# holds the CHANGELOG's top entry, the chart's version and appVersion, the
# Python and npm packages and the built --version to VERSION. Only when HEAD
# carries a v… tag (or RELEASE=1) does it also want the tag to be vVERSION
# and the CHANGELOG entry dated.
.PHONY: release-check
release-check: ## One version everywhere: CHANGELOG, --version, the chart, the client packages; needs no tag (a v… tag on HEAD must match).
	GO='$(GO)' scripts/release-check

.PHONY: transcripts
transcripts: ## Record clients/testdata/transcripts (the client libraries' golden tests) from the real server.
	$(GO) test -count=1 -run '^TestRecordTranscripts$$' ./client -update

.PHONY: cover
cover: ## Statement coverage of the recovery core.
	$(GO) test -cover ./recovery/...

# make bench: every benchmark BENCH_COUNT times, interleaved by go test's
# -count within each package, then benchstat: the median of each metric
# (the x-direct ratios included) with its spread (± the 95 % confidence
# interval), which is what docs/performance.md quotes, with the date. BENCH narrows
# the benchmarks (a -bench regexp), BENCH_PKGS the packages.
BENCH       ?= .
BENCH_PKGS  ?= ./...
BENCH_COUNT ?= 6
BENCH_OUT   ?= bench.txt

.PHONY: bench
bench: $(BIN)/benchstat ## Run the benchmarks BENCH_COUNT (6) times and print their medians and spread with benchstat (raw runs in BENCH_OUT).
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCH_COUNT) $(BENCH_PKGS) | tee $(BENCH_OUT)
	$(BIN)/benchstat $(BENCH_OUT)

# make loadbench: bench/loadbench (docs/performance.md) — the mock upstream,
# direct openai-go calls, the bare gRPC relay and completiond, each server a
# process of its own, interleaved at LOADBENCH_LEVELS concurrent streams ×
# LOADBENCH_REPS repetitions, each client on one gRPC channel and
# completiond on its shipped defaults (with a second configuration, the
# streams spread over channels, to compare); the markdown table goes to
# stdout and to LOADBENCH_OUT. Not part of make test (its smoke test is). LOADBENCH_FLAGS
# adds flags: go run ./bench/loadbench -h lists them (durations, pacing,
# the quiet-machine wait, -profile-dir).
LOADBENCH_LEVELS ?= 1,100,1000,5000
LOADBENCH_REPS   ?= 3
LOADBENCH_OUT    ?= loadbench.md
LOADBENCH_FLAGS  ?=

.PHONY: loadbench
loadbench: ## Load benchmark vs a bare gRPC relay: LOADBENCH_LEVELS streams × LOADBENCH_REPS; table to stdout and LOADBENCH_OUT.
	$(GO) run ./bench/loadbench -levels '$(LOADBENCH_LEVELS)' -reps '$(LOADBENCH_REPS)' -out '$(LOADBENCH_OUT)' $(LOADBENCH_FLAGS)

# make fleetbench: bench/loadbench fleet (docs/performance.md) — one
# completiond process against a fleet of 3 replicas sharing a fresh
# redis-server (installed with apt-get when missing, as make test does),
# and the same 3 replicas without Redis (-unshared=false: not them),
# streaming phase only, at FLEETBENCH_LEVELS concurrent streams ×
# FLEETBENCH_REPS interleaved repetitions, on the shipped defaults; time to
# first token, server and Redis CPU and Redis commands per 1 000 tokens.
# The markdown table goes to stdout and to FLEETBENCH_OUT. Not part of make
# test (its smoke test is). FLEETBENCH_FLAGS adds flags: go run
# ./bench/loadbench fleet -h lists them (-token-rate, -replicas,
# -resume-grace, durations, the quiet-machine wait).
FLEETBENCH_LEVELS ?= 100,1000
FLEETBENCH_REPS   ?= 3
FLEETBENCH_OUT    ?= fleetbench.md
FLEETBENCH_FLAGS  ?=

.PHONY: fleetbench
fleetbench: redis-installed ## Fleet benchmark: completiond alone vs 3 replicas sharing Redis (and without it), FLEETBENCH_LEVELS streams × FLEETBENCH_REPS; table to stdout and FLEETBENCH_OUT.
	$(GO) run ./bench/loadbench fleet -levels '$(FLEETBENCH_LEVELS)' -reps '$(FLEETBENCH_REPS)' -out '$(FLEETBENCH_OUT)' $(FLEETBENCH_FLAGS)

.PHONY: tools
tools: $(TOOLS) ## Install the pinned buf, protoc-gen-go, protoc-gen-go-grpc, protoc-gen-doc, grpcurl, staticcheck and benchstat into ./bin.

.PHONY: grpcurl
grpcurl: $(BIN)/grpcurl ## Install the pinned grpcurl into ./bin (all the quick start needs).

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/protoc-gen-doc:
	GOBIN=$(BIN) $(GO) install github.com/pseudomuto/protoc-gen-doc/cmd/protoc-gen-doc@$(PROTOC_GEN_DOC_VERSION)
$(BIN)/grpcurl:
	GOBIN=$(BIN) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(BIN)/benchstat:
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

# Generators that are not Go programs, pinned (defined before generate, whose
# prerequisites make expands as it reads them): protoc (its python and pyi
# generators) and grpcio's grpc_python_plugin, from Debian bookworm's
# protobuf-compiler and protobuf-compiler-grpc (installed with apt-get when
# missing and root); ts-proto from clients/node/package-lock.json (npm ci).
PROTOC_VERSION             ?= 3.21.12
GRPC_PYTHON_PLUGIN_VERSION ?= 1.51.1
NODE_CLIENT  := clients/node
NODE_MODULES := $(NODE_CLIENT)/node_modules/.package-lock.json
DEBIAN_PROTOC_PACKAGES := protobuf-compiler protobuf-compiler-grpc

.PHONY: generate
generate: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-doc protoc-installed $(NODE_MODULES) ## Regenerate gen/ (Go), the Python and the TypeScript stubs and docs/api-reference.md from proto/ and third_party/googleapis.
	$(BIN)/buf generate
	$(BIN)/buf generate --template buf.gen.googleapis.yaml
	scripts/python-gen-imports
	$(BIN)/buf generate --template buf.gen.docs.yaml

.PHONY: protoc-installed
protoc-installed:
	@command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null || { 		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then 			echo "installing $(DEBIAN_PROTOC_PACKAGES) with apt-get"; 			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBIAN_PROTOC_PACKAGES) >/dev/null; 		else echo "protoc and grpc_python_plugin are needed: apt-get install $(DEBIAN_PROTOC_PACKAGES)"; exit 1; fi; }
	@v=$$(protoc --version); [ "$$v" = "libprotoc $(PROTOC_VERSION)" ] || { echo "protoc is $$v, want $(PROTOC_VERSION) (Debian bookworm's protobuf-compiler)"; exit 1; }
	@v=$$(dpkg-query -W -f='$${Version}' protobuf-compiler-grpc 2>/dev/null || true); case "$$v" in $(GRPC_PYTHON_PLUGIN_VERSION)-*) ;; 		*) echo "grpc_python_plugin is from protobuf-compiler-grpc '$$v', want $(GRPC_PYTHON_PLUGIN_VERSION) (Debian bookworm)"; exit 1;; esac

# npm ci installs exactly the lock file; npm writes node_modules/.package-lock.json.
$(NODE_MODULES): $(NODE_CLIENT)/package-lock.json $(NODE_CLIENT)/package.json
	cd $(NODE_CLIENT) && npm ci --no-audit --no-fund
	@touch $@

.PHONY: lint
lint: $(BIN)/buf $(BIN)/staticcheck ## go vet, staticcheck, gofmt, buf lint and buf format check.
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BIN)/buf lint
	$(BIN)/buf format -d --exit-code

GENERATED := gen clients/python/src/completiond/_proto $(NODE_CLIENT)/src/gen docs/api-reference.md

.PHONY: checkgenerate
checkgenerate: generate ## Regenerate and fail if the generated code (Go, Python, TypeScript) or docs/api-reference.md differs from what is committed.
	@git add -N $(GENERATED) >/dev/null 2>&1 || true
	@if ! git diff --quiet -- $(GENERATED); then echo "generated code is stale: run make generate and commit"; git diff --stat -- $(GENERATED); exit 1; fi

# make breaking: proto/ against BREAKING_REF, by default the commit before
# HEAD — on main the state before the last merge, on a branch its previous
# commit. A shallow clone (CI) is deepened until BREAKING_REF is there; a
# BREAKING_REF without proto/ (HEAD is the first commit, or the one adding
# the API) has nothing to break, and says so.
BREAKING_REF ?= HEAD~1

.PHONY: breaking
breaking: $(BIN)/buf ## Check proto/ against BREAKING_REF (HEAD~1) for WIRE_JSON breaking changes.
	@set -e; ref='$(BREAKING_REF)'; \
	while ! git rev-parse -q --verify "$$ref^{commit}" >/dev/null && [ "$$(git rev-parse --is-shallow-repository)" = true ]; do \
		echo "breaking: $$ref is not in this shallow clone: git fetch --deepen=1"; \
		before=$$(git rev-list --count HEAD); git fetch -q --deepen=1; \
		if [ "$$(git rev-list --count HEAD)" = "$$before" ]; then break; fi; \
	done; \
	if ! sha=$$(git rev-parse -q --verify "$$ref^{commit}"); then \
		if [ "$$ref" = HEAD~1 ] && [ -z "$$(git rev-list --parents -n 1 HEAD | cut -s -d' ' -f2)" ]; then \
			echo "breaking: HEAD is the first commit: no earlier proto/ to break"; exit 0; \
		fi; \
		echo "breaking: $$ref is not a commit"; exit 1; \
	fi; \
	if [ -z "$$(git ls-tree -d "$$sha" proto)" ]; then \
		echo "breaking: $$ref ($$sha) has no proto/: nothing to break"; exit 0; \
	fi; \
	echo "breaking: proto/ against $$ref ($$sha)"; \
	$(BIN)/buf breaking --against ".git#ref=$$sha"

# Container image and Helm chart: docs/deploying.md. `make image` builds
# with Debian's buildah (installed with apt-get when missing and root), in vfs
# storage, which needs no daemon, no overlay support and no container runtime.
# IMAGE_MODE=local (default): FROM scratch (Containerfile.local) out of a
# static binary built here, no registry needed; IMAGE_MODE=source: the
# two-stage Containerfile (golang → distroless), which pulls both bases.
IMAGE      ?= localhost/completiond:dev
IMAGE_MODE ?= local
BUILDAH    ?= buildah --storage-driver vfs
HELM_VERSION ?= v3.22.0
CHART      := deploy/helm/completiond

.PHONY: image
image: buildah-installed ## Build the container image $(IMAGE) with buildah (IMAGE_MODE=local|source), also tagged with the version.
	IMAGE='$(IMAGE)' IMAGE_VERSION='$(VERSION)' BUILDAH='$(BUILDAH)' GO='$(GO)' scripts/image-build.sh $(IMAGE_MODE)

.PHONY: image-smoke
image-smoke: buildah-installed $(BIN)/grpcurl ## Run $(IMAGE) (built by make image) from its read-only root as its user: health, auth, a sim Stream, SIGTERM.
	IMAGE='$(IMAGE)' BUILDAH='$(BUILDAH)' GRPCURL='$(BIN)/grpcurl' scripts/image-smoke.sh

# make image-push DEST=…: the image make image built, from its vfs storage
# (which neither docker nor a plain buildah push looks into), to any
# destination buildah knows: docker://REGISTRY/NAME:TAG, docker-daemon:NAME:TAG,
# docker-archive:FILE:NAME:TAG, oci:DIR:TAG, oci-archive:FILE:TAG, dir:DIR.
DEST ?=

.PHONY: image-push
image-push: buildah-installed ## Push $(IMAGE) (built by make image) to DEST, e.g. DEST=docker://registry.example.com/completiond:TAG.
	@[ -n '$(DEST)' ] || { echo 'make image-push needs DEST: docker://REGISTRY/completiond:TAG, docker-daemon:completiond:dev, oci:DIR:TAG, dir:DIR …'; exit 2; }
	$(BUILDAH) push '$(IMAGE)' '$(DEST)'

# make image-push-check: the push steps of docs/deploying.md, verbatim,
# into an OCI layout and a dir: directory, and what arrived checked.
.PHONY: image-push-check
image-push-check: buildah-installed ## Push $(IMAGE) into an OCI layout and a dir: directory as docs/deploying.md says, and check what arrived.
	IMAGE='$(IMAGE)' BUILDAH='$(BUILDAH)' MAKE='$(MAKE)' scripts/image-push-check.sh

.PHONY: buildah-installed
buildah-installed:
	@command -v buildah >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing buildah with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null; \
		else echo "buildah is needed: install it (apt-get install buildah)"; exit 1; fi; }

# The tests of a fleet (the event log in Redis, health, the replicas) run
# a real redis-server (internal/redistest), and fail without it.
.PHONY: redis-installed
redis-installed: ## Install Debian's redis-server with apt-get when missing (the fleet tests need it).
	@command -v redis-server >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing redis-server with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else echo "redis-server is needed by the fleet tests: apt-get install redis-server"; exit 1; fi; }

# make test-valkey runs the tests that run a real Redis (internal/redistest's
# servers: the fleet's log, leases, health, shared guard, the replicas as
# processes) on Valkey instead of redis-server, without the race detector
# (make test has it): Debian's valkey-server VALKEY_VERSION, unpacked into
# ./bin (scripts/fetch-valkey: from this Debian's sources and its
# backports, with a private apt state; nothing is installed), running on
# redis-server's libraries.
VALKEY_VERSION ?= 8.0.1+dfsg1-1~bpo12+1
VALKEY_SERVER  := $(BIN)/valkey-$(VALKEY_VERSION)/root/usr/bin/valkey-server

$(VALKEY_SERVER): | redis-installed
	scripts/fetch-valkey '$(BIN)/valkey-$(VALKEY_VERSION)' '$(VALKEY_VERSION)'

.PHONY: test-valkey
test-valkey: test-deps $(VALKEY_SERVER) ## The tests that run a real Redis, on Debian's valkey-server VALKEY_VERSION instead (unpacked into ./bin).
	REDISTEST_SERVER='$(VALKEY_SERVER)' $(GO) test -count=1 -timeout 15m ./internal/redistest/ ./internal/redisscript/ ./internal/fleet/ ./internal/guard/ ./service/
	REDISTEST_SERVER='$(VALKEY_SERVER)' $(GO) test -count=1 -timeout 15m -run 'Fleet' ./cmd/completiond/

.PHONY: chart
chart: $(BIN)/helm ## helm lint and helm template of the chart (default and every-feature values), and its Go test.
	$(BIN)/helm lint --strict $(CHART)
	$(BIN)/helm lint --strict $(CHART) -f $(CHART)/ci/all-values.yaml
	$(BIN)/helm template completiond $(CHART) >/dev/null
	$(BIN)/helm template completiond $(CHART) -f $(CHART)/ci/all-values.yaml >/dev/null
	HELM='$(BIN)/helm' $(GO) test -count=1 ./deploy/...

# Installs helm at HELM_VERSION with go install, as the other tools (about
# 2.5 minutes on 2 cores). The -X flags are those of helm's own release
# builds: its version, and the Kubernetes version `helm lint` and `helm
# template` assume (its client-go's, v0.37 → 1.37; without them, 1.20).
HELM_K8S_MAJOR ?= 1
HELM_K8S_MINOR ?= 37
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,pkg/lint/rules pkg/chartutil,-X helm.sh/helm/v3/$(p).k8sVersionMajor=$(HELM_K8S_MAJOR) -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_K8S_MINOR))
$(BIN)/helm:
	GOBIN=$(BIN) $(GO) install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# ---- Python client: clients/python (package completiond-client), examples/python ----
# Only Debian bookworm's packages: python3-grpcio 1.51.1 and python3-protobuf
# 3.21.12 at run time (the generated code in clients/python/src/completiond/_proto
# was made by the matching protoc and grpc_python_plugin), setuptools and pip
# to install the package, mypy to type-check it. PYTHON is Debian's python3:
# another one on PATH (pyenv) lacks those packages.
PYTHON         ?= /usr/bin/python3
PYTHON_CLIENT  := clients/python
DEBIAN_PYTHON_PACKAGES := python3 python3-grpcio python3-protobuf python3-setuptools python3-pip python3-build python3-venv mypy
PYTHON_ENV     := PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: python-deps
python-deps: ## Install the Python client's Debian packages (python3-grpcio, python3-protobuf, setuptools, pip, build, venv, mypy) with apt-get when missing.
	@if ! $(PYTHON) -c 'import grpc, google.protobuf, setuptools, pip, build, venv' 2>/dev/null || ! $(PYTHON) -m mypy --version >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing $(DEBIAN_PYTHON_PACKAGES) with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBIAN_PYTHON_PACKAGES) >/dev/null; \
		else echo "the Python client needs: apt-get install $(DEBIAN_PYTHON_PACKAGES)"; exit 1; fi; fi
	@$(PYTHON) -c 'import grpc, google.protobuf; print("python-deps: $(PYTHON): grpcio", grpc.__version__, "protobuf", google.protobuf.__version__)'

.PHONY: python-test
python-test: python-deps ## Python client without a server: unit, golden-transcript and Session-replay tests, mypy, and a pip install of the package.
	cd $(PYTHON_CLIENT) && $(PYTHON_ENV) PYTHONPATH=src $(PYTHON) -m unittest discover -s tests -t .
	cd $(PYTHON_CLIENT) && $(PYTHON) -m mypy
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp -r $(PYTHON_CLIENT)/pyproject.toml $(PYTHON_CLIENT)/README.md $(PYTHON_CLIENT)/src "$$tmp"/; \
	$(PYTHON_ENV) $(PYTHON) -m pip install -q --root-user-action=ignore --no-deps --no-build-isolation --target "$$tmp/site" "$$tmp"; \
	cd "$$tmp/site" && $(PYTHON_ENV) $(PYTHON) -c 'import completiond, pathlib; p = pathlib.Path(completiond.__file__).parent; \
		assert (p / "py.typed").exists() and (p / "_proto/completion/v1/completion_pb2.pyi").exists(), "py.typed and the .pyi stubs are installed"; \
		print("python-test: pip installs completiond-client", completiond.__version__)'

.PHONY: python-e2e
python-e2e: python-deps ## Python client against a real completiond (scripts/with-server): e2e tests, a reconnect through a cut connection, and the examples.
	$(PYTHON_ENV) GO='$(GO)' PYTHONPATH=$(PYTHON_CLIENT)/src scripts/with-server $(PYTHON) -m unittest discover -s $(PYTHON_CLIENT)/e2e -t $(PYTHON_CLIENT)
# ---- end of the Python client block ----

# ---- Node.js client: clients/node (@completiond/client) and examples/node ----
# node-deps installs Node.js and npm with apt-get when they are missing and
# make runs as root (Debian's nodejs is 18, the oldest Node the package
# supports), then npm ci in both folders: exactly their lock files. npm ci in
# clients/node runs its prepare script, which builds dist/ with tsc; the
# examples depend on that folder (file:../../clients/node, a symlink).
NODE_EXAMPLES         := examples/node
NODE_EXAMPLES_MODULES := $(NODE_EXAMPLES)/node_modules/.package-lock.json
NODE_MIN_MAJOR        := 18

.PHONY: node-installed
node-installed:
	@command -v node >/dev/null && command -v npm >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing nodejs and npm with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
		else echo "Node.js $(NODE_MIN_MAJOR)+ and npm are needed: apt-get install nodejs npm"; exit 1; fi; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= $(NODE_MIN_MAJOR) ? 0 : 1)' || \
		{ echo "Node.js $(NODE_MIN_MAJOR)+ is needed, this is $$(node --version)"; exit 1; }

$(NODE_MODULES): | node-installed

# --ignore-scripts: npm would run the linked client's prepare (tsc) again.
$(NODE_EXAMPLES_MODULES): $(NODE_EXAMPLES)/package-lock.json $(NODE_EXAMPLES)/package.json $(NODE_MODULES)
	cd $(NODE_EXAMPLES) && npm ci --no-audit --no-fund --ignore-scripts
	@touch $@

.PHONY: node-deps
node-deps: $(NODE_MODULES) $(NODE_EXAMPLES_MODULES) ## Node client: Node.js and npm (apt-get when missing and root), npm ci in clients/node (builds dist/) and examples/node.

.PHONY: node-build
node-build: $(NODE_MODULES) ## Node client: build clients/node/dist (JavaScript and .d.ts) with tsc.
	cd $(NODE_CLIENT) && npm run build

.PHONY: node-test
node-test: node-build ## Node client: unit, golden transcript and Session replay tests (no server).
	cd $(NODE_CLIENT) && npm test

.PHONY: node-e2e
node-e2e: node-build $(NODE_EXAMPLES_MODULES) ## Node client against a real server (scripts/with-server): its e2e tests, then the examples.
	GO='$(GO)' scripts/with-server bash -c 'npm --prefix $(NODE_CLIENT) run test:e2e && npm --prefix $(NODE_EXAMPLES) test'
# ---- end of the Node.js client block ----

# ---- Packages: make dist, make dist-check (docs/development.md) ----
.PHONY: dist
dist: image python-deps $(NODE_MODULES) ## Build every artifact into dist/: server tarball, image (OCI archive), Python wheel and sdist, npm tarball, SHA256SUMS.
	VERSION='$(VERSION)' IMAGE='$(IMAGE)' BUILDAH='$(BUILDAH)' GO='$(GO)' PYTHON='$(PYTHON)' scripts/dist.sh

.PHONY: dist-check
dist-check: python-deps node-installed buildah-installed ## Install each artifact of dist/ into a clean environment and run an example of it against a real server.
	VERSION='$(VERSION)' BUILDAH='$(BUILDAH)' GO='$(GO)' PYTHON='$(PYTHON)' scripts/dist-check.sh
