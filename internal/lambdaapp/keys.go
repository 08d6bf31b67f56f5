package lambdaapp

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/otpguard/otpguard/internal/app"
)

// signingKeys reads the token signing key's versions: AWSCURRENT signs;
// AWSPREVIOUS (tokens it signed are still live) and AWSPENDING (a key
// about to sign, which backends should learn first) are in the JWKS
// too. A refresh is one DescribeSecret; a version's value is read once,
// when it first appears.
type signingKeys struct {
	sm   *secrets
	id   string
	log  *slog.Logger
	vals map[string]string // version id -> secret string, of the versions in use
}

var keyStages = []string{"AWSCURRENT", "AWSPREVIOUS", "AWSPENDING"}

// load returns the keys and a name of the versions in force.
func (k *signingKeys) load(ctx context.Context) (app.Keys, string, error) {
	versions, err := k.sm.versions(ctx, k.id)
	if err != nil {
		return app.Keys{}, "", err
	}
	vid := map[string]string{} // stage -> version
	for v, stages := range versions {
		for _, st := range stages {
			if slices.Contains(keyStages, st) {
				vid[st] = v
			}
		}
	}
	if vid["AWSCURRENT"] == "" {
		return app.Keys{}, "", fmt.Errorf("secret %s has no AWSCURRENT version", k.id)
	}
	vals := map[string]string{}
	var ids []string
	var keys app.Keys
	for _, st := range keyStages {
		v := vid[st]
		if v == "" {
			continue
		}
		s, ok := k.vals[v]
		if !ok {
			if s, err = k.sm.getVersion(ctx, k.id, v); err != nil {
				return app.Keys{}, "", err
			}
		}
		vals[v] = s
		key, err := KeyFromSecret(s)
		if err != nil {
			if st == "AWSCURRENT" {
				return app.Keys{}, "", fmt.Errorf("signing secret %s: %w", k.id, err)
			}
			k.log.WarnContext(ctx, "a signing key version is unreadable; it is left out of the JWKS", "stage", st, "err", err)
			continue
		}
		if st == "AWSCURRENT" {
			keys.Signing = key
		} else {
			keys.Others = append(keys.Others, key.Public().(ed25519.PublicKey))
		}
		ids = append(ids, st+":"+v)
	}
	k.vals = vals
	return keys, strings.Join(ids, ","), nil
}
