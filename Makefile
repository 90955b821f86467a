# Run `make` (or `make help`) for the list of targets.
SHELL := /bin/bash
GO ?= go
NODE_HARNESS := tests/bullmqnode
# PostgreSQL connections of make test: at most 2 packages (-p 2) run at once, each at most 2
# tests at a time (-parallel 2). A test holds at most 11 connections of its own database
# (pgtest.AppConns 8 + pgtest.OwnerConns 3) plus one administrator connection while it creates
# or drops it; a test that starts the service adds its pools of at most 10 each
# (servicetest.ServiceConns); a test that runs bin/app as a child sets DATABASE_MAX_CONNS.
# Measured peak: see the README's Set-up; make test-loaded checks it beside 40
# connections held by another client.
TEST_FLAGS ?= -race -count=1 -p 2 -parallel 2 -timeout 30m

.DEFAULT_GOAL := help

# make help lists the targets by group; a target in no group is listed under "Other".
HELP_GROUPS := \
  "Daily:run test demo lint clean" \
  "Build and generate:build migrate wire api-doc events-doc flows-doc" \
  "Checks:test-short test-loaded wire-check docs-check openapi-lint fuzz model model-mutants ci" \
  "Benchmarks and load:bench bench-idem bench-bullmq bench-outbox bench-scaleout soak chaos" \
  "Clean-up:clean-testdb" \
  "Install helpers (make calls them when needed):node-deps openapi-deps browser-deps jq model-deps"

.PHONY: help
help: ## Show this help
	@targets=$$(grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST)); listed=" help "; \
	for g in $(HELP_GROUPS); do \
	  printf '\n\033[1m%s\033[0m\n' "$${g%%:*}"; \
	  for t in $${g#*:}; do listed="$$listed$$t "; \
	    grep -E "^$$t:.*## " <<<"$$targets" | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'; \
	  done; \
	done; \
	other=$$(while IFS= read -r l; do t=$${l%%:*}; [[ "$$listed" == *" $$t "* ]] || echo "$$l"; done <<<"$$targets"); \
	if [ -n "$$other" ]; then printf '\n\033[1mOther\033[0m\n'; awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' <<<"$$other"; fi

.PHONY: run
run: ## Build bin/app, then run the whole service in one process with development defaults (migrates first; installs jq for the README's "Try it" when missing)
	@command -v jq >/dev/null 2>&1 || $(MAKE) --no-print-directory jq || echo "make run: jq could not be installed; the README's Try it needs it (make jq)" >&2
	@echo "make run: building bin/app (the first build compiles every dependency: a few minutes)"
	@$(GO) build -o bin/app ./cmd/app
	@echo "make run: starting bin/app all; Ctrl-C stops it cleanly"
	@exec bin/app all

.PHONY: build
build: ## Build bin/app
	$(GO) build -o bin/app ./cmd/app

.PHONY: demo
demo: build ## Walk through every flow on a throwaway instance of its own (own database, ports, Redis prefix), then remove it
	$(GO) run ./cmd/demo -app bin/app -image docs/demo/mug.png

.PHONY: migrate
migrate: ## Apply database migrations (MIGRATE_DATABASE_URL)
	$(GO) run ./cmd/app migrate

.PHONY: node-deps
node-deps: ## Install Node.js BullMQ for the interop tests, from the lock file
	@if [ -f $(NODE_HARNESS)/package-lock.json ]; then npm ci --prefix $(NODE_HARNESS) --no-audit --no-fund --loglevel=error; fi

.PHONY: browser-deps
browser-deps: ## Install Debian's chromium for the console's browser test (tests/console_browser_test.go), when missing
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

.PHONY: pgbouncer
pgbouncer: ## Install Debian's pgbouncer for the transaction-pooling test (tests/pgbouncer_test.go), when missing
	@command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer)

.PHONY: test
test: node-deps jq ## Run the whole test suite with the race detector (needs PostgreSQL and Redis; tests/readme_test.go runs the README's Try it with jq)
	@$(BROWSER_CHECK)
	$(GO) test $(TEST_FLAGS) ./...
	@$(BROWSER_CHECK)

# BROWSER_CHECK says, on stderr and whatever go test's verbosity, that the console's browser
# tests skip when chromium is missing (outside CI; CI fails them instead).
BROWSER_CHECK = command -v "$${CHROMIUM:-chromium}" >/dev/null 2>&1 || \
	echo "*** WARNING: chromium not found: the console's browser tests (tests/console_*browser_test.go) SKIP; make browser-deps installs it ***" >&2

.PHONY: test-loaded
test-loaded: node-deps jq ## make test while 40 PostgreSQL connections are held by another client; prints the suite's peak connections (HOLD=40)
	$(GO) run ./internal/connhold -hold $(or $(HOLD),40) -- $(GO) test $(TEST_FLAGS) ./...

.PHONY: test-short
test-short: ## Unit tests only (no database)
	$(GO) test -short -count=1 ./...

.PHONY: jq
jq: ## Install jq (the README's "Try it" uses it) with apt-get, when missing
	@command -v jq >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq)

.PHONY: clean
clean: ## Remove what this checkout's make run and make test left (its test databases, bin/, STORAGE_DIR, node_modules) and say what; CLEAN_FLAGS=-shared also the shared defaults (the listing database, templates, default key prefixes)
	$(GO) run ./internal/devclean $(CLEAN_FLAGS)

.PHONY: clean-testdb
clean-testdb: ## Drop the test databases this checkout's interrupted test runs left (CLEAN_FLAGS=-shared: every checkout's, and the templates)
	$(GO) run ./internal/devclean -only testdbs $(CLEAN_FLAGS)

.PHONY: fuzz
# The budgets are counts of executions, not durations: with a duration, Go 1.26's fuzz
# coordinator can fail the target with "context deadline exceeded" as the time runs out, a
# race of its own with nothing found (go.dev/issue/75804, fixed in Go 1.27).
fuzz: ## Run the fuzz targets briefly
	$(GO) test -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime 60000x -timeout 5m ./infra/idem
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 60000x -timeout 5m ./infra/cloudevent

.PHONY: lint
lint: docs-check openapi-lint ## gofmt, go vet (the service and the bench module), docs-check and openapi-lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

OPENAPI_LINT := tools/openapi-lint

.PHONY: openapi-deps
openapi-deps: $(OPENAPI_LINT)/node_modules/.package-lock.json ## Install Redocly CLI (the OpenAPI linter) from tools/openapi-lint's lock file (npm's cache first: works offline once fetched)

$(OPENAPI_LINT)/node_modules/.package-lock.json: $(OPENAPI_LINT)/package-lock.json
	@npm ci --prefix $(OPENAPI_LINT) --prefer-offline --no-audit --no-fund --loglevel=error

.PHONY: openapi-lint
openapi-lint: openapi-deps ## Lint infra/httpapi/openapi.yaml with Redocly's recommended OpenAPI 3 rules (fails on an error)
	@REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1 \
	  $(OPENAPI_LINT)/node_modules/.bin/redocly lint --config $(OPENAPI_LINT)/redocly.yaml --format=summary infra/httpapi/openapi.yaml 2>&1 | \
	  grep -v '[║╔╚]'; exit $${PIPESTATUS[0]}

.PHONY: api-doc
api-doc: ## Regenerate the operationIds and error responses of openapi.yaml and docs/http-api.md from infra/httpapi/endpoints.go, and openapi.yaml's operation types from the flows' registry
	$(GO) test -count=1 -run '^TestEndpointDocsAreCurrent$$' ./infra/httpapi -update

# References to files outside the repository: the design notes the project started from
# and their sections. The pattern is spelled so that it does not match itself.
DOCS_REF_RE := \.\./shared|shared/(seed|[A-Z]+[.]md)|\b(API|DESIGN|BULLMQ|STYLE)[.]md|seed('s)? ?§|§ ?[0-9]|\bseed('s)? (promise|document|design|section)

# What README.md and docs/ must not say: they speak of the project, not of how its work was
# organised (issue or pull-request numbers, work sessions, who did what). A figure carries the
# version (commit) and date it was measured on instead.
DOCS_WORK_RE := [Ii]ssues? \#?[0-9]+|\(\#[0-9]+\)|\bPR \#?[0-9]+|\b([Tt]his|[Tt]he earlier|[Tt]he previous|[Tt]he last|[Aa]n earlier|[Oo]ur) (work )?session|\b[Tt]he issue\b|\bwho (did|ran|wrote|measured)\b

.PHONY: docs-check
docs-check: ## Fail when a document or comment refers to a file outside the repository, or README/docs speak of issues and who did the work
	@out=$$(git grep -nIE --untracked "$(DOCS_REF_RE)" | grep -vE 'RFC [0-9]+ §[0-9]'); \
	if [ -n "$$out" ]; then echo "$$out"; echo "docs-check: refer to docs/ (http-api.md, architecture.md, guarantees.md, bullmq-wire.md, operations.md) instead"; exit 1; fi
	@out=$$(git grep -nIE --untracked "$(DOCS_WORK_RE)" -- README.md docs/); \
	if [ -n "$$out" ]; then echo "$$out"; echo "docs-check: README and docs/ speak of the project: no issue numbers, sessions or who did the work; date a figure by version and date"; exit 1; fi

.PHONY: events-doc
events-doc: ## Regenerate docs/events.md, the integration event catalogue, from the code's event registry
	$(GO) test -count=1 -run '^TestCatalogIsCurrent$$' ./infra/eventstream/catalog -update

.PHONY: flows-doc
flows-doc: ## Regenerate the flows' table of docs/bullmq-wire.md from the registry (app/worker/flows)
	$(GO) test -count=1 -run '^TestCatalogueIsCurrent$$' ./app/worker/flows -update

.PHONY: wire
wire: ## Regenerate wire_gen.go
	$(GO) tool wire gen .

.PHONY: wire-check
wire-check: ## Fail when wire_gen.go is not what wire generates
	$(GO) tool wire diff . || (echo "wire_gen.go is stale: run make wire"; exit 1)

.PHONY: bench
bench: node-deps ## The benchmark suite (bench/, a module of its own): one table of ratios against peers measured in the same run (BENCH_FLAGS=-h lists flags)
	cd bench && $(GO) run . -root .. $(BENCH_FLAGS)

.PHONY: soak
soak: ## Not in CI: 350 events/s (SOAK_FLAGS=-rate N) with bursts of 10x for 3 s a minute for 30 min, a REPEATABLE READ held 5 min; a line a minute (claim p50/p99, live table, WAL/event, Redis, CPU per event) (SOAK_FLAGS=-soak-minutes 10 -soak-hold-from 3 -soak-hold-to 8)
	cd bench && $(GO) run . -root .. -soak $(SOAK_FLAGS)

.PHONY: bench-idem
bench-idem: ## POST /stores with vs without the idempotency middleware, 32 clients (p50/p99 ratios, replay ratio)
	$(GO) run ./internal/idembench
	$(GO) test -run '^$$' -count=1 -bench BenchmarkIdempotentWrite -benchtime 100x ./infra/idem

.PHONY: bench-bullmq
bench-bullmq: node-deps ## Go BullMQ publisher and consumer vs Node.js BullMQ addBulk and Worker, 100,000 jobs
	$(GO) run ./infra/bullmq/cmd/bullmqbench

.PHONY: bench-outbox
bench-outbox: node-deps ## Outbox drain (1 and 10,000 workspaces) vs Node.js addBulk; commit-to-job latency at 1,000/s
	OUTBOX_BENCH=1 $(GO) test -count=1 -run '^TestOutboxBench$$' -v -timeout 30m ./infra/outbox/

.PHONY: bench-scaleout
bench-scaleout: ## 1, 2 and 4 dispatch + work process pairs drain one 100,000-event backlog on PostgreSQL and a 3-node Redis Cluster (not in bench or CI; SCALEOUT_FLAGS=-h lists flags)
	$(GO) run ./internal/scaleout -perf $(SCALEOUT_FLAGS)

.PHONY: chaos
chaos: ## Chaos run of bin/app under load: kills, Redis restarts, dropped DB connections, then checks (not in CI; CHAOS_FLAGS=-h lists flags)
	$(GO) run ./internal/chaos $(CHAOS_FLAGS)

.PHONY: model-deps
model-deps: ## Install Debian's spin (the model checker of make model), when missing
	@command -v spin >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spin)

.PHONY: model
model: model-deps ## Check the delivery protocol's Promela models exhaustively with spin (model/README.md); fails on any violation
	model/check.sh model

.PHONY: model-mutants
model-mutants: model-deps ## Remove one guard at a time from the models and report what spin finds
	model/check.sh mutants

.PHONY: ci
ci: lint wire-check test fuzz model ## What CI runs
