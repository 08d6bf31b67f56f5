# otpguard — see README.md. Every target works on a fresh machine with Go;
# the ones that need redis-server install it (as root, with apt) first.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run test bench lint vet redis-server

## run: the whole API on 127.0.0.1:8080, on an embedded Redis, with the local outbox
run:
	$(GO) run ./cmd/otpguard

## test: vet, staticcheck and every test, against real redis-server and Redis Cluster
test: redis-server vet lint
	$(GO) test -race -count=1 ./...
	cd tests/bench && $(GO) vet ./...

vet:
	$(GO) vet ./...

lint:
	$(GO) run $(STATICCHECK) ./...
	cd tests/bench && $(GO) run $(STATICCHECK) ./...

## bench: otpguard against go-redis/redis_rate on one local redis-server
bench: redis-server
	cd tests/bench && $(GO) run . -duration 3s -rounds 3

## redis-server: install Debian's redis-server (and redis-cli) when missing
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing redis-server with apt-get"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else \
			echo "make: redis-server and redis-cli are needed: sudo apt-get install redis-server" >&2; exit 1; \
		fi; \
	fi
