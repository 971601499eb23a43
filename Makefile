# weir's build. `make test` is what CI runs (.ci/run) and what the README
# gives users: unit tests with -race, then the integration tests against a
# real Kafka broker and schema registry that this Makefile starts and stops.

# weir needs Go 1.27 (generic methods); the go command fetches it.
export GOTOOLCHAIN ?= go1.27.3

SHELL := /bin/bash
ENV_DIR := integration/env
# Every Go module of the repository; each has its own go.mod.
MODULES := . $(patsubst %/go.mod,%,$(wildcard weirtest/kafka/go.mod examples/go.mod cmd/weir/go.mod bench/go.mod bench/peers/go.mod)) integration
# Modules whose tests need no cluster (but for the service tests of the
# examples, which take it when it runs).
UNIT_MODULES := $(filter-out integration,$(MODULES))

# env.sh written by integration/env/up.sh (see integration/env/common.sh).
ENV_FILE := $(or $(WEIR_ENV_DIR),$(or $(WEIR_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/weir)/env)/env.sh
# The replicated three-broker cluster's (WEIR_BROKERS=3 up.sh).
ENV3_FILE := $(or $(WEIR_REPLICATED_ENV_DIR),$(or $(WEIR_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/weir)/env3)/env.sh

GO_TEST_FLAGS ?=
INTEGRATION_TIMEOUT ?= 30m
# The integration tests run without the race detector by default: sarama
# v1.61.1 races on its transaction manager's last error when a producer is
# fenced with batches in flight (transaction_manager.go, publishTxnPartitions
# reads lastError without statusLock), which the fencing tests provoke on
# purpose. weir's own concurrency is checked by the unit tests, which run
# with -race; `make test-integration INTEGRATION_RACE=-race` runs these too.
INTEGRATION_RACE ?=
# The integration packages run one at a time (-p 1): the chaos tests
# restart the broker and own the fault proxy's port, which would break
# another package's tests running beside them.
# Unit-test packages that provoke that same race of sarama's on purpose (the
# relay example fences its own producer with batches in flight) run without
# the race detector; the race is sarama's, in code weir does not reach
# otherwise.
NORACE_PKGS := github.com/weirstream/weir/examples/relay

.PHONY: test test-unit test-integration verify-install release kafka-up kafka-down lint demo bench bench-peers fuzz chaos soak conformance

# Every fuzz target of the root module, as package:Target.
FUZZ_TARGETS := $(shell grep -rl --include='*_test.go' '^func Fuzz' . 2>/dev/null | grep -v '^./\(integration\|examples\|bench\)/' | \
	xargs -r grep -ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/^func //' | sort -u)
# How long each fuzz target runs: briefly in `make test`, longer in `make fuzz`.
FUZZ_TIME_SHORT ?= 2s
FUZZ_TIME ?= 60s

## test: start the cluster, then unit tests (the examples' service tests
## use the cluster through weirtest/kafka), integration tests, and stop it.
test:
	@rc=0; $(MAKE) --no-print-directory kafka-up && \
	$(MAKE) --no-print-directory test-unit && \
	$(MAKE) --no-print-directory verify-install && \
	$(MAKE) --no-print-directory test-integration || rc=$$?; \
	$(MAKE) --no-print-directory kafka-down; exit $$rc

## verify-install: serve the working tree as a module proxy at a release
## candidate version (VERIFY_VERSION), then, with an empty module cache and
## no workspace, go install the CLI and build a new service module that
## go gets weir and weirtest/kafka and runs its tests (internal/release).
VERIFY_VERSION ?= v0.0.0-verify
verify-install:
	cd internal/release && GOWORK=off go run . -root ../.. -verify $(VERIFY_VERSION)

## release: VERSION=v0.N.M on a clean tree: set every cross-module
## requirement to VERSION (with its go.sum lines), commit, and tag the
## three published modules (VERSION, weirtest/kafka/VERSION,
## cmd/weir/VERSION). Push the commit and the tags yourself.
release:
	@test -n "$(VERSION)" || { echo "make release VERSION=v0.N.M"; exit 2; }
	@test -z "$$(git status --porcelain)" || { echo "release: the tree has changes; commit or stash them first"; exit 1; }
	cd internal/release && GOWORK=off go run . -root ../.. -bump $(VERSION)
	git commit -qam "release $(VERSION)"
	git tag $(VERSION) && git tag weirtest/kafka/$(VERSION) && git tag cmd/weir/$(VERSION)
	@echo "tagged $(VERSION), weirtest/kafka/$(VERSION) and cmd/weir/$(VERSION); push with: git push origin HEAD $(VERSION) weirtest/kafka/$(VERSION) cmd/weir/$(VERSION)"

## test-unit: every module's unit tests, with the race detector, then
## every fuzz target briefly (FUZZ_TIME_SHORT). A service test that asks
## weirtest/kafka for a cluster gets the one of `make kafka-up` when it runs,
## and is skipped otherwise (failed under CI=true).
test-unit:
	@if [ -f "$(ENV_FILE)" ] && [ -z "$$WEIR_BOOTSTRAP_SERVERS" ]; then . "$(ENV_FILE)"; fi; \
	set -e; for m in $(UNIT_MODULES); do \
		echo "== unit tests: $$m"; \
		(cd $$m && all=$$(go list ./...) && \
		 race=$$(grep -vxF -f <(printf '%s\n' $(NORACE_PKGS)) <<<"$$all" || true) && \
		 norace=$$(grep -xF -f <(printf '%s\n' $(NORACE_PKGS)) <<<"$$all" || true) && \
		 if [ -n "$$race" ]; then go test -race -count=1 $(GO_TEST_FLAGS) $$race; fi && \
		 if [ -n "$$norace" ]; then echo "(without -race: $$norace)"; go test -count=1 $(GO_TEST_FLAGS) $$norace; fi); \
	done
	@$(MAKE) --no-print-directory fuzz FUZZ_TIME=$(FUZZ_TIME_SHORT)

## fuzz: every fuzz target of the root module for FUZZ_TIME each (default 60s).
fuzz:
	@set -e; for target in $(FUZZ_TARGETS); do \
		pkg=$$(grep -rl --include='*_test.go' "^func $$target(" . | grep -v '^./\(integration\|examples\|bench\)/' | head -1 | xargs dirname); \
		echo "== fuzz $$target in $$pkg for $(FUZZ_TIME)"; \
		go test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZ_TIME) $$pkg; \
	done

## conformance: the long pass of the DSL conformance suite
## (conformance/README.md): SEEDS seeds (default 10) of RECORDS records
## (default 500) per scenario through weir and through Kafka Streams'
## TopologyTestDriver, built with Maven; `make test` runs a short pass
## (3 seeds of 200) with the unit tests.
SEEDS ?= 10
RECORDS ?= 500
conformance:
	WEIR_CONFORMANCE_SEEDS=$(SEEDS) WEIR_CONFORMANCE_RECORDS=$(RECORDS) go test -count=1 -v -run '^TestConformance$$' -timeout 1h ./conformance

## test-integration: integration/ against WEIR_BOOTSTRAP_SERVERS and
## WEIR_SCHEMA_REGISTRY_URL, taken from the cluster of `make kafka-up` when
## that cluster is running.
test-integration:
	@if [ -f "$(ENV_FILE)" ] && [ -z "$$WEIR_BOOTSTRAP_SERVERS" ]; then . "$(ENV_FILE)"; fi; \
	if [ -f "$(ENV3_FILE)" ] && [ -z "$$WEIR_REPLICATED_BOOTSTRAP_SERVERS" ]; then . "$(ENV3_FILE)"; fi; \
	echo "== replicated cluster: $${WEIR_REPLICATED_BOOTSTRAP_SERVERS:-<none>}"; \
	echo "== integration tests: Kafka $${WEIR_KAFKA_VERSION:-?} at $${WEIR_BOOTSTRAP_SERVERS:-<none>}, $${WEIR_REGISTRY_VERSION:-registry} at $${WEIR_SCHEMA_REGISTRY_URL:-<none>}"; \
	log=$$(mktemp -t weir-integration.XXXXXX); \
	(cd integration && go test -p 1 $(INTEGRATION_RACE) -count=1 -v -timeout $(INTEGRATION_TIMEOUT) $(GO_TEST_FLAGS) ./...) 2>&1 | tee "$$log"; \
	rc=$${PIPESTATUS[0]}; awk -f $(ENV_DIR)/failures.awk "$$log"; rm -f "$$log"; exit $$rc

## chaos: the long version of the chaos tests (integration/chaos_test.go):
## CHAOS_ROUNDS rounds of each fault scenario (default 5; `make test` runs
## one on the single broker) on the replicated three-broker cluster of
## `make kafka-up`, which it starts, with the scenarios of leader moves,
## coordinator and replica loss and rolling restarts besides; CHAOS_BROKERS=1
## runs on the single broker instead.
CHAOS_ROUNDS ?= 5
CHAOS_BROKERS ?= 3
chaos:
	@$(MAKE) --no-print-directory kafka-up && . "$(ENV_FILE)" && . "$(ENV3_FILE)" && cd integration && \
	WEIR_CHAOS_BROKERS=$(CHAOS_BROKERS) WEIR_CHAOS_ROUNDS=$(CHAOS_ROUNDS) go test -count=1 -v -run '^TestChaos$$' -timeout 4h .

## soak: three exactly-once instances on the replicated cluster under
## steady input for SOAK (default 30m) while a nemesis injects a fault
## every 20-60 s; the verifier checks every record at the end
## (integration/soak_test.go). A failed soak keeps its topics on the
## cluster and the instances' logs in WEIR_IT_KEEP_LOGS (default
## soak-logs/).
SOAK ?= 30m
soak:
	@$(MAKE) --no-print-directory kafka-up && . "$(ENV_FILE)" && . "$(ENV3_FILE)" && cd integration && \
	WEIR_IT_KEEP_LOGS=$${WEIR_IT_KEEP_LOGS:-$(CURDIR)/soak-logs} WEIR_SOAK=$(SOAK) go test -count=1 -v -run '^TestSoak$$' -timeout 6h .

## kafka-up: start Kafka 4.4.0 and Apicurio Registry on 127.0.0.1, and a
## replicated three-broker Kafka cluster beside them (no-op when up).
kafka-up:
	@$(ENV_DIR)/up.sh && WEIR_BROKERS=3 $(ENV_DIR)/up.sh

## kafka-down: stop them by their recorded PIDs and delete their data.
kafka-down:
	@$(ENV_DIR)/down.sh; WEIR_BROKERS=3 $(ENV_DIR)/down.sh

## lint: gofmt and go vet over every module.
lint:
	@out=$$($$(go env GOROOT)/bin/gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES); do (cd $$m && go vet ./...); done

## demo: the word-count example on an embedded broker, no setup needed.
demo:
	@if [ -d examples/wordcount ]; then cd examples && go run ./wordcount; \
	else echo "no example exists yet"; fi

## bench: benchmarks against the cluster of `make kafka-up` (see bench/README.md).
bench:
	@if [ -f bench/go.mod ]; then \
		. "$(ENV_FILE)" && cd bench && go run . ; \
	else echo "no benchmark exists yet"; fi

## bench-peers: weir, Kafka Streams 4.4 and goka on the same workloads
## against the cluster of `make kafka-up` (bench/peers); the table goes to
## bench/results/peers-<time>.md. PEERS_FLAGS adds flags (-h lists them),
## among them the comma lists -caches (record cache bytes, default
## 10485760; 0: every update), -wordcount-words (distinct words, default
## 10000) and -restore-records (store sizes, default 5000000), each value
## a point of its own, e.g.
## PEERS_FLAGS='-caches 10485760,0 -wordcount-words 10000,100000,1000000'.
PEERS_FLAGS ?=
bench-peers:
	@. "$(ENV_FILE)" && cd bench/peers/kstreams && mvn -q -B -DskipTests package && \
	cd .. && go build -o $(CURDIR)/bin/peers . && \
	$(CURDIR)/bin/peers -kstreams kstreams -results ../results $(if $(wildcard $(dir $(ENV_FILE))broker.pid),-broker-pid-file "$(dir $(ENV_FILE))broker.pid") $(PEERS_FLAGS)
