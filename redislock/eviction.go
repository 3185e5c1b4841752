package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

// evictionSetting is the server setting an evicting deployment gets wrong.
const evictionSetting = "maxmemory-policy"

// EvictionError is the error of Acquire on a server whose maxmemory-policy
// may evict keys: evicting a lock key or its token counter breaks mutual
// exclusion and tokens. It is a setting of the server, not a failure of
// it; it matches distlock.ErrInvalidOption, since WithEvictionAllowed (in
// a URL, eviction_allowed=true) accepts the risk.
type EvictionError struct {
	Addr   string // the server (a Cluster primary), or "the server"
	Policy string // its maxmemory-policy
}

// Error implements error.
func (e *EvictionError) Error() string {
	return fmt.Sprintf("redislock: %s is %q on %s: evicting lock keys or fencing counters breaks mutual exclusion and tokens; set %s noeviction, or accept the risk with WithEvictionAllowed",
		evictionSetting, e.Policy, e.Addr, evictionSetting)
}

// Unwrap returns distlock.ErrInvalidOption.
func (e *EvictionError) Unwrap() error { return driver.ErrInvalidOption }

// checkEviction refuses a server whose maxmemory-policy may evict keys,
// unless WithEvictionAllowed. The check runs at the first Acquire and is
// remembered once it passed; a refusal is not remembered, so that a server
// whose setting was fixed is accepted at the next Acquire. It is skipped
// when the server does not let this client run CONFIG GET (renamed or
// disabled, or denied by an ACL), as managed services often do.
func (b *Backend) checkEviction(ctx context.Context) error {
	if b.cfg.evictionAllowed || b.policyOK.Load() {
		return nil
	}
	b.policyMu.Lock()
	defer b.policyMu.Unlock()
	if b.policyOK.Load() {
		return nil
	}
	policies, err := b.evictionPolicies(ctx)
	if err != nil {
		if configUnavailable(err) {
			b.policyOK.Store(true)
			return nil
		}
		return classify(ctx, "CONFIG GET "+evictionSetting, err)
	}
	for addr, p := range policies {
		if p != "noeviction" {
			return &EvictionError{Addr: addr, Policy: p}
		}
	}
	b.policyOK.Store(true)
	return nil
}

// evictionPolicies reads maxmemory-policy from the server, or from every
// primary of a Cluster.
func (b *Backend) evictionPolicies(ctx context.Context) (map[string]string, error) {
	get := func(ctx context.Context, c redis.UniversalClient) (string, error) {
		m, err := c.ConfigGet(ctx, evictionSetting).Result()
		if err != nil {
			return "", err
		}
		p, ok := m[evictionSetting]
		if !ok {
			return "", errNoSetting
		}
		return p, nil
	}
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		out := map[string]string{}
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			p, err := get(ctx, c)
			if err == nil {
				mu.Lock()
				out[c.Options().Addr] = p
				mu.Unlock()
			}
			return err
		})
		return out, err
	}
	p, err := get(ctx, b.client)
	if err != nil {
		return nil, err
	}
	addr := "the server"
	if c, ok := b.client.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	return map[string]string{addr: p}, nil
}

// errNoSetting is a CONFIG GET reply without the setting: a server that
// is not Redis itself, whose eviction this package cannot check.
var errNoSetting = errors.New("redislock: CONFIG GET " + evictionSetting + ": no such setting")

// configUnavailable reports a server that does not let this client read its
// configuration (CONFIG renamed away, or denied by an ACL), or that has no
// such setting.
func configUnavailable(err error) bool {
	if errors.Is(err, errNoSetting) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := strings.ToLower(rerr.Error())
	return strings.HasPrefix(msg, "noperm") || strings.Contains(msg, "unknown command")
}
