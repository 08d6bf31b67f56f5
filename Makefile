# otpguard — see README.md and docs/running.md. Every target works on a fresh machine with Go;
# the ones that need redis-server install it (as root, with apt) first.

SHELL       := /bin/bash
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The Lambda functions: template.yaml logical id -> folder under functions/.
FUNCTIONS   := SendFunction VerifyFunction JwksFunction HealthFunction LoginFunction SignupFunction BackendFunction DeliverFunction \
               CognitoSendFunction CognitoAuthFunction
dir_SendFunction    := send
dir_DeliverFunction := deliver
dir_VerifyFunction  := verify
dir_JwksFunction    := jwks
dir_HealthFunction  := health
dir_LoginFunction   := login
dir_SignupFunction  := signup
dir_BackendFunction := backend
dir_CognitoSendFunction := cognitosend
dir_CognitoAuthFunction := cognitoauth
# Lambda builds: the Runtime API client only (no RPC), static, stripped,
# reproducible. GOARCH follows the template's Architectures (arm64).
LAMBDA_GOARCH ?= arm64
LAMBDA_FLAGS  := -tags lambda.norpc -trimpath -ldflags='-s -w -buildid='
ARTIFACTS_DIR ?= dist

.PHONY: run test mutate bench fuzz soak simulate lint vet redis-server valgrind cognito-local esdk-node chromium console build $(addprefix build-,$(FUNCTIONS))

## run: the whole API on 127.0.0.1:8080, on an embedded Redis, with the local outbox
run:
	$(GO) run ./cmd/otpguard

## test: vet, staticcheck and every test, against real redis-server and Redis Cluster
## (the product module, then the tests module: e2e, lambda, deploy, faults). Every suite
## runs whatever an earlier one did; the failures are listed at the end, with one exit status.
test: redis-server cognito-local esdk-node chromium
	@set -o pipefail; log=$$(mktemp -d); failed=""; \
	step() { name=$$1; shift; echo "== $$name"; if ! "$$@" 2>&1 | tee "$$log/$$name.log"; then failed="$$failed $$name"; fi; }; \
	step vet $(MAKE) --no-print-directory vet; \
	step staticcheck $(MAKE) --no-print-directory lint; \
	step product $(GO) test -race -count=1 -timeout 30m ./...; \
	step allocs bash -c '$(GO) test -count=1 -timeout 5m ./guard/ && $(GO) test -count=1 -timeout 5m -run Allocat ./guard/redisstore/'; \
	step tests bash -c 'cd tests && $(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v /faults)'; \
	step faults bash -c "cd tests && $(GO) test -race -count=1 -timeout 30m -v ./faults 2>&1 | grep -v -e '^=== ' -e '^    --- PASS'; exit \$${PIPESTATUS[0]}"; \
	step phonenumbers third_party/phonenumbers/upstream-tests.sh; \
	if [ -n "$$failed" ]; then \
		echo; echo "make test: FAILED:$$failed"; for f in $$failed; do grep -h -E -e '^(--- FAIL|FAIL|panic:)' -e '^\s+--- FAIL' -e '^\s+\S+_test\.go:[0-9]+:' $$log/$$f.log; done; \
		rm -rf "$$log"; exit 1; fi; \
	rm -rf "$$log"; echo "make test: every suite passed"

# The product module, and the test and tool modules beside it (tests/,
# tests/bench, tests/mutate), each with its own go.mod so the product carries only the product.
MODULES := . tests tests/bench tests/mutate

vet:
	@bad=$$(gofmt -l .); if [ -n "$$bad" ]; then echo "gofmt: these files need gofmt -w:"; echo "$$bad"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

lint:
	@for m in $(MODULES); do (cd $$m && $(GO) run $(STATICCHECK) ./...) || exit 1; done

## mutate: mutation testing (not part of test: hours on two cores): gremlins on each Go package of
## MUTATE_PKGS (each mutant against its package's tests); tests/mutate's own Go mutator on each
## package of MUTATE_OWN, whose behaviour is tested mostly outside it (pkg=stage|stage: each mutant
## through go test -overlay against a stage's test packages, the next stage while it survives);
## its mutator on otpguard.lua (against the store tests); the kill rate per package and the
## surviving mutants. Runs under nice -n 19.
MUTATE_PKGS ?= guard/token,guard/esdk,guard/captcha,guard/memstore,guard/redisstore
MUTATE_OWN  ?= config=./config|./guard,./guard/api,./internal/app;guard=./guard|./guard/memstore,./guard/api,./internal/app,./internal/triggers|./guard/redisstore;guard/api=./guard/api,./internal/triggers|./internal/app;guard/identity=./guard/identity|./guard/api,./internal/app;guard/pacer=./guard,./guard/api|./guard/redisstore
MUTATE_LUA  ?= true
mutate: redis-server
	cd tests/mutate && nice -n 19 $(GO) run . -root ../.. -pkgs '$(MUTATE_PKGS)' -own '$(MUTATE_OWN)' -lua=$(MUTATE_LUA) $(MUTATE_FLAGS)

## bench: otpguard side by side with redis_rate, ulule/limiter, throttled and a raw Lua floor on
## local redis-servers (allowed mix, attack mix, memory per subject, cluster leases, the server's
## instructions per call under callgrind); then the client's allocations per decision, and the Lambda
## bootstraps' cold starts (21) and warm durations under AWS's Lambda Runtime Interface Emulator
bench: redis-server valgrind
	cd tests/bench && $(GO) run . -duration 3s -rounds 5
	$(GO) test -run '^$$' -bench Allow -benchmem -cpu 1,32 ./guard/redisstore
	$(GO) test -run '^$$' -bench DenyCacheHit -benchmem -cpu 1,32 ./guard
	$(GO) test -run '^$$' -bench SendHTTP -benchmem -benchtime 5000x ./internal/app
	cd tests && $(GO) test -run '^$$' -bench Init -benchtime 21x ./lambda
	cd tests && $(GO) test -run '^$$' -bench 'Warm/^(send|send-queued|deliver|verify|login)$$' -benchtime 200x ./lambda
	cd tests && $(GO) test -run '^$$' -bench 'Warm/^send-queued-idle$$' -benchtime 20x ./lambda

## fuzz: each Go fuzz target for FUZZTIME (default 30s); make test runs their seed corpora
FUZZTIME ?= 30s
FUZZ_TARGETS := ./guard:FuzzParseEmail ./guard:FuzzParsePhone ./guard:FuzzParseIP ./config:FuzzParseConfig \
	./guard/api:FuzzDecodeBytes ./guard/api:FuzzClientIP ./internal/apigw:FuzzRequest
fuzz:
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done

## soak: the built server for SOAK (default 2m) at a steady mixed load on a real redis-server:
## heap and goroutines at start and end, keys without a TTL, 5xx, p99 per minute
SOAK ?= 2m
soak: redis-server
	cd tests && $(GO) run ./soak -duration $(SOAK)

## simulate: a simulated day of users and attacks under the default config, one rule, no guard
## (and CONFIG=path, yours): the table on stdout, a report with charts in dist/simulate
simulate:
	$(GO) run ./cmd/simulate $(if $(CONFIG),-config $(CONFIG)) -out dist/simulate

## cognito-local: the local Cognito user-pool API the e2e tests front (npm, pinned by package-lock.json)
cognito-local: tests/e2e/cognito/node_modules/.bin/cognito-local
tests/e2e/cognito/node_modules/.bin/cognito-local: tests/e2e/cognito/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make: npm is needed for cognito-local (apt-get install nodejs npm)" >&2; exit 1; }
	cd tests/e2e/cognito && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## esdk-node: the AWS Encryption SDK for JavaScript, which encrypts the codes of the
## custom sender triggers' tests as Cognito does (npm, pinned by package-lock.json)
esdk-node: tests/lambda/esdk/node_modules/.package-lock.json
tests/lambda/esdk/node_modules/.package-lock.json: tests/lambda/esdk/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make: npm is needed for the Encryption SDK (apt-get install nodejs npm)" >&2; exit 1; }
	cd tests/lambda/esdk && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## chromium: install Debian's chromium when missing (the console's browser test drives it headless)
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "make: chromium is needed for the console's browser test: sudo apt-get install chromium" >&2; exit 1; \
		fi; \
	fi

## console: the operator console on http://127.0.0.1:8090 against make run (OTPGUARD_TOKEN=its ADMIN_TOKEN or VIEWER_TOKEN);
## SERVER=url names another server, CONSOLE_FLAGS= passes more flags (-listen, -stack, ...)
console:
	$(GO) run ./cmd/otpguard console -server $(or $(SERVER),http://127.0.0.1:8080) $(CONSOLE_FLAGS)

## redis-server: install Debian's redis-server (and redis-cli) when missing
valgrind:
	@if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_control >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing valgrind with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; \
		else \
			echo "make: valgrind is needed for make bench's instruction counts: sudo apt-get install valgrind" >&2; exit 1; \
		fi; \
	fi

redis-server:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing redis-server with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else \
			echo "make: redis-server and redis-cli are needed: sudo apt-get install redis-server" >&2; exit 1; \
		fi; \
	fi

## build: every Lambda bootstrap, as `sam build` would, into dist/<LogicalId>/bootstrap; prints sizes
build:
	@for f in $(FUNCTIONS); do $(MAKE) --no-print-directory build-$$f ARTIFACTS_DIR=$(CURDIR)/dist/$$f || exit 1; done
	@echo "function          bytes      MB"; for f in $(FUNCTIONS); do \
		stat -c %s dist/$$f/bootstrap | awk -v f=$$f '{printf "%-16s %9d %7.2f\n", f, $$1, $$1/1048576}'; done

# build-<LogicalId>: what `sam build` runs for each function (BuildMethod: makefile).
# ASN_DATABASE (a GeoLite2-ASN or DB-IP ASN Lite .mmdb) ships in each package as
# asn.mmdb: config network.asnDatabase: /var/task/asn.mmdb. A file the repository
# holds at asn.mmdb (gitignored) is used when ASN_DATABASE is not given.
ASN_DATABASE ?= $(wildcard asn.mmdb)
$(addprefix build-,$(FUNCTIONS)): build-%:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(LAMBDA_GOARCH) $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(dir_$*)
	$(if $(ASN_DATABASE),cp $(ASN_DATABASE) $(ARTIFACTS_DIR)/asn.mmdb)
