package etcdlock

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// liveSession returns b's live session for ttl, or nil.
func liveSession(b *Backend, ttl time.Duration) *session {
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions[secs]
}

// SessionDone returns the Done channel of b's concurrency.Session for ttl:
// etcd's own signal that the session ended. Nil if there is none.
func SessionDone(b *Backend, ttl time.Duration) <-chan struct{} {
	if s := liveSession(b, ttl); s != nil {
		return s.cs.Done()
	}
	return nil
}

// SessionLease returns the etcd lease of b's session for ttl, or 0.
func SessionLease(b *Backend, ttl time.Duration) clientv3.LeaseID {
	if s := liveSession(b, ttl); s != nil {
		return s.id
	}
	return 0
}

// OrphanSession stops the keep-alive of b's session for ttl, as the etcd
// client does on its own when etcd has not answered for a TTL: the session's
// Done closes while its lease may still live in etcd.
func OrphanSession(b *Backend, ttl time.Duration) bool {
	s := liveSession(b, ttl)
	if s != nil {
		s.cs.Orphan()
	}
	return s != nil
}

// ParsedURL is what OpenURL reads from a URL.
type ParsedURL struct {
	Endpoints      []string
	Prefix         string
	User, Password string
	TLS            bool
	DialTimeout    time.Duration
	RequestTimeout time.Duration
}

// ParseURL parses an OpenURL URL without connecting.
func ParseURL(raw string) (ParsedURL, error) {
	u, err := parseURL(raw)
	if err != nil {
		return ParsedURL{}, err
	}
	return ParsedURL{u.endpoints, u.prefix, u.user, u.password, u.tls != nil, u.dialTimeout, u.requestTimeout}, nil
}
