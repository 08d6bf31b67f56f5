package redisstore

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
)

// UnblockedChannel is the pub/sub channel on which an unblock made through
// one process reaches the others (see guard.Options.Unblocked and
// guard.Guard.Forget). A message is the states cleared, "ID:Tag,ID:Tag":
// rule ids and keyed hashes, no identifier.
const UnblockedChannel = "og:unblocked"

// PublishUnblocked tells every process on rdb's Redis that states were
// cleared.
func PublishUnblocked(ctx context.Context, rdb redis.UniversalClient, states []guard.State) error {
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = s.ID + ":" + s.Tag
	}
	return rdb.Publish(ctx, UnblockedChannel, strings.Join(parts, ",")).Err()
}

// SubscribeUnblocked hands the states other processes unblocked to forget,
// until ctx ends. Each (re)subscription calls forgetAll first: messages
// may have been missed while the connection was down, and a Redis that
// restarted lost its state anyway.
func SubscribeUnblocked(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger, forget func([]guard.State), forgetAll func()) {
	ps := rdb.Subscribe(ctx, UnblockedChannel)
	go func() {
		defer ps.Close()
		ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(30*time.Second), redis.WithChannelSendTimeout(time.Second))
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				switch m := m.(type) {
				case *redis.Subscription:
					forgetAll()
				case *redis.Message:
					var states []guard.State
					for _, p := range strings.Split(m.Payload, ",") {
						if id, tag, ok := strings.Cut(p, ":"); ok {
							states = append(states, guard.State{ID: id, Tag: tag})
						}
					}
					forget(states)
				default:
					log.Warn("unexpected pub/sub message", "type", slog.AnyValue(m).Kind().String())
				}
			}
		}
	}()
}
