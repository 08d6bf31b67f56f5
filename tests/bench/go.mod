module github.com/otpguard/otpguard/tests/bench

go 1.26.8

replace github.com/otpguard/otpguard => ../..

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/otpguard/otpguard v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/throttled/throttled/v2 v2.15.0
	github.com/ulule/limiter/v3 v3.11.2
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/nyaruka/phonenumbers v1.8.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/nyaruka/phonenumbers => ../../third_party/phonenumbers
