package app

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/redis/go-redis/v9"
)

// BearerAdmin authorizes the internal routes with a bearer token,
// compared in constant time; an empty token refuses everyone. The
// scheme's name is case-insensitive (RFC 9110 §11.1): "bearer" is
// "Bearer".
func BearerAdmin(token string) func(*http.Request) bool {
	want := []byte(token)
	return func(r *http.Request) bool {
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		return token != "" && ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(got), want) == 1
	}
}

// LogRedis sends go-redis's own messages (dial failures, pool notices,
// printed as plain text on stderr by default) into the JSON log.
func LogRedis(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
