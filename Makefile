# effectively — the commands a user and CI run. See README.md.
SHELL := /bin/bash
GO ?= go
BIN := bin/effectively
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X main.version=$(VERSION)
# Packages whose tests start goroutines or talk to the real stack run with
# the race detector; the whole module is cheap enough to run that way.
# -parallel 3: the real-stack tests spend most of their time waiting (on a
# fault's window, a session's expiry, a paced producer), so three at a time
# on two cores finish sooner than two.
TEST_FLAGS ?= -race -count=1 -timeout 14m -parallel 3
FUZZTIME ?= 10m
# make test's fuzz budget is an execution count: it cannot race the clock on a loaded machine.
FUZZ_SHORT ?= 10000x
# Each input the fuzzer finds new coverage with is minimized, for up to 60 s by
# default: one such input cost make test a minute (FuzzDecodeBinary, 68 s for
# 10,000 executions). make test caps minimizing at an execution count too.
FUZZ_MINIMIZE ?= 60s
FUZZ_MINIMIZE_SHORT ?= 2000x


.PHONY: cdc bench-cdc
.PHONY: docs build closure test test-on-stack vet demo bench bench-on-stack bench-memory bench-memory-on-stack soak soak-on-stack scale scale-on-stack chaos fuzz stack-up stack-down stack-status stack-logs clean

# The release: no crashpoint build tag (the fault suites build their binary with -tags crashpoint).
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/effectively

## test: vet, format check, every test against the real stack (started and stopped here), short fuzz runs.
test:
	stack/with-stack.sh $(MAKE) --no-print-directory test-on-stack

# The engine's module (.) requires only what the engine imports; the suites
# and tools with heavy dependencies are modules of their own, joined for
# contributors by go.work: test/ (end-to-end and fault suites, the bench;
# Docker's client, a browser driver, plotting), deploy/ (the chart's tests;
# Helm, Kubernetes) and the example build examples/orders-go.
NESTED_MODULES := test deploy examples/orders-go
ALL_PACKAGES := ./... $(addprefix ./,$(addsuffix /...,$(NESTED_MODULES)))

test-on-stack: vet build
	test/ensure-chromium.sh
	$(GO) test $(TEST_FLAGS) $(ALL_PACKAGES)
	$(GO) test -count=1 -tags crashpoint ./internal/crashpoint/
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SHORT) FUZZ_MINIMIZE=$(FUZZ_MINIMIZE_SHORT)

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet $(ALL_PACKAGES)
	$(GO) vet -tags crashpoint ./internal/crashpoint/ ./cmd/effectively/
	for m in . $(NESTED_MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "$$m: go.mod is not tidy; fix: (cd $$m && go mod tidy)"; exit 1; }; done

## closure: what a team's `go mod tidy` downloads when it requires the engine (an empty module cache; needs the Go proxy), beside franz-go + pgx alone.
closure:
	GO=$(GO) test/closure.sh

## fuzz: each fuzz target for FUZZTIME (make fuzz FUZZTIME=10m for long runs; make test runs FUZZ_SHORT executions of each).
fuzz:
	GO=$(GO) FUZZ_MINIMIZE=$(FUZZ_MINIMIZE) test/fuzz.sh $(FUZZTIME)

## chaos: the fault-injection suite's default profile (200,000 events, 3 workers, ≥ 32 kills, rebalances, 2 broker and
## 2 PostgreSQL restarts, a paused member, one of each network fault) with its table of figures. CHAOS_PROFILE=network:
## 150,000 events, every network fault (toxiproxy, in-process) 5 times with kills mixed in. CHAOS_SEED=N reproduces a run;
## make test runs the short profile.
CHAOS_PROFILE ?= default
CHAOS_SEED ?=
chaos:
	stack/with-stack.sh env EFFECTIVELY_CHAOS_PROFILE=$(CHAOS_PROFILE) EFFECTIVELY_CHAOS_SEED=$(CHAOS_SEED) \
	  $(GO) test -count=1 -v -timeout 60m -run '^TestChaos$$' ./test/

## cdc: the change-data-capture suite against a real source: stack.sh up cdc starts a source PostgreSQL with logical replication and
## Kafka Connect 4.4 with Debezium's PostgreSQL connector; a table is snapshotted and changed while Connect and the workers (the stock
## binary with config-only sinks and the examples/customers-go build with handlers and an outbox) are SIGKILLed, once as JSON and once
## as Avro through the registry (a fifth of the size); each replica must equal the source by digest, never regress, keep one history
## row per change and send one notification per status transition. And a transaction begun while the slot is created, committed
## after the snapshot (streamed with an LSN below the snapshot's reads), must reach the replica. CDC_ROWS, CDC_CHANGES size it.
CDC_ROWS ?= 100000
CDC_CHANGES ?= 240000
cdc:
	stack/with-stack.sh bash -c 'stack/stack.sh up cdc && trap "stack/stack.sh down cdc" EXIT && eval "$$(stack/stack.sh env)" && \
	  EFFECTIVELY_TEST_CDC_ROWS=$(CDC_ROWS) EFFECTIVELY_TEST_CDC_CHANGES=$(CDC_CHANGES) $(GO) test -count=1 -v -timeout 90m -run "^TestCDC" -skip "^TestCDCBesideJDBCSink$$" ./test/'

## bench-cdc: the same Debezium change stream into the Debezium JDBC sink (upsert mode) and into effectively (stack.sh up cdc): each
## alone from the topic's start until its target equals the source (records/s, median of BENCH_CDC_RUNS alternating runs), then both
## at once while Connect and the worker are SIGKILLed, every row of both targets sampled every 200 ms for a state older than one the
## target had shown. Prints the figures (docs/explanation/benchmarks.md); asserts only effectively's zero and both targets' digests.
## BENCH_CDC_ROWS, BENCH_CDC_CHANGES, BENCH_CDC_RUNS size it.
BENCH_CDC_ROWS ?= 100000
BENCH_CDC_CHANGES ?= 200000
BENCH_CDC_RUNS ?= 3
bench-cdc:
	stack/with-stack.sh bash -c 'stack/stack.sh up cdc && trap "stack/stack.sh down cdc" EXIT && eval "$$(stack/stack.sh env)" && \
	  EFFECTIVELY_TEST_CDC_ROWS=$(BENCH_CDC_ROWS) EFFECTIVELY_TEST_CDC_CHANGES=$(BENCH_CDC_CHANGES) EFFECTIVELY_TEST_CDC_RUNS=$(BENCH_CDC_RUNS) \
	  $(GO) test -count=1 -v -timeout 90m -run "^TestCDCBesideJDBCSink$$" ./test/'

## demo: start the stack, migrate, run the worker (the main job).
demo: build
	EFFECTIVELY_KEEP_STACK=1 stack/with-stack.sh test/demo.sh

## bench: throughput of the worker (E), the config-only sink on JSON and on Avro (E-sink, E-sink-avro) against consume-only (B1), the database ceiling (B2) and a naive worker (B3),
## end-to-end latency at a fixed rate, peak RSS, then the memory per record (bench-memory). Prints, never asserts.
## Flags: make bench BENCH_FLAGS='-runs 1 -events 50000'.
BENCH_FLAGS ?=
bench: build
	stack/with-stack.sh $(MAKE) --no-print-directory bench-on-stack

bench-on-stack:
	$(GO) run ./test/bench $(BENCH_FLAGS)
	@echo "== memory per record: records of about 1 MiB on 16 partitions through a config-only sink and through Go handlers"
	$(GO) run ./test/bench -memory $(MEMORY_FLAGS)
	@echo "== static membership: the stall of a SIGKILLed member's partitions, with and without kafka.instance_id"
	EFFECTIVELY_BENCH_MEMBERSHIP=1 $(GO) test -count=1 -v -run '^TestStaticMembershipStall$$' ./test/ | grep -E '^(scenario|dynamic|static|SIGKILL|[(]stall|--|ok|FAIL|---)'
	@echo "== static membership: a graceful scale-down's stall and the wait before replay, with and without kafka.leave_on_shutdown"
	EFFECTIVELY_BENCH_MEMBERSHIP=1 $(GO) test -count=1 -v -run '^TestStaticScaleDownAndReplayWait$$' ./test/ | grep -E '^(scenario|static|2 static|[(]stall|--|ok|FAIL)'

## bench-memory: the worker's Go heap (idle, peak, after the run) and peak RSS with records of about 1 MiB on every
## partition, through a config-only sink (jsonb column) and through Go handlers; checks their rows. Prints, never asserts.
## Flags: make bench-memory MEMORY_FLAGS='-memory-records 64 -memory-gomemlimit 345MiB'.
MEMORY_FLAGS ?=
bench-memory: build
	stack/with-stack.sh $(MAKE) --no-print-directory bench-memory-on-stack

bench-memory-on-stack:
	$(GO) run ./test/bench -memory $(MEMORY_FLAGS)

## soak: the maximum, then a paced load at 80% of it for 30 minutes with claims retention of 2 minutes, sampled every 10 s;
## prints a table and a summary, writes docs/explanation/soak.md and soak.png. Prints, never asserts; CI never runs it.
## Flags: make soak SOAK_FLAGS='-soak-duration 3m -soak-retention 1m' (see go run ./test/bench -h).
SOAK_FLAGS ?=
soak: build
	stack/with-stack.sh $(MAKE) --no-print-directory soak-on-stack

soak-on-stack:
	$(GO) run ./test/bench -soak $(SOAK_FLAGS)

## scale: the benchmark topic drained by 1, 2 and 3 worker processes against one database (events/s, ratio, CPU per event).
## Prints, never asserts. Flags: make scale SCALE_FLAGS='-events 200000 -runs 3'.
SCALE_FLAGS ?=
scale: build
	stack/with-stack.sh $(MAKE) --no-print-directory scale-on-stack

scale-on-stack:
	$(GO) run ./test/bench -scale 1,2,3 $(SCALE_FLAGS)

## docs: regenerate docs/reference (CLI, configuration, metrics, dead-letter reasons) from the reference build's code.
## make test fails when it is stale (cmd/effectively/docs_test.go).
docs:
	$(GO) run ./cmd/effectively gen-docs docs/reference

stack-up:
	stack/stack.sh up
stack-down:
	stack/stack.sh down
stack-status:
	stack/stack.sh status
stack-logs:
	stack/stack.sh logs

clean:
	rm -rf bin
