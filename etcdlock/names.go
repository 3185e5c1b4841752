package etcdlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// DefaultPrefix is the prefix of every lock name when WithPrefix is not
// given.
const DefaultPrefix = "distlock/"

// ownerDir is the part of the prefix under which sessions record their
// owner: "<prefix>%00/<lease ID in hex>". No lock name can start with it,
// since keys never contain NUL and escaping never writes "%00".
const ownerDir = "%00/"

// KeyPath returns where key's lock lives in etcd: its lock name, the
// Backend's prefix followed by key with every "%" written as "%25" and
// every "/" as "%2F". It is the NAME to give `etcdctl lock NAME` to contend
// for the same lock; the keys of the holder and the waiters are NAME + "/"
// + their lease ID in lowercase hex, the holder being the one created
// first.
//
// Escaping "/" keeps the keys of one lock out of every other lock's range
// ("a" and "a/b" are "a" and "a%2Fb"), and escaping "%" keeps the mapping
// one-to-one ("a/b" and "a%2Fb" are "a%2Fb" and "a%252Fb").
func (b *Backend) KeyPath(key string) string { return lockName(b.cfg.prefix, key) }

// lockName is the lock name of key under prefix (see KeyPath).
func lockName(prefix, key string) string { return prefix + escapeKey(key) }

func escapeKey(key string) string {
	if !strings.ContainsAny(key, "%/") {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var unescaper = strings.NewReplacer("%2F", "/", "%25", "%")

func unescapeKey(name string) string { return unescaper.Replace(name) }

// List implements driver.Lister: it reads every lock key under the
// Backend's prefix whose key starts with prefix, and reports for each lock
// name the key created first (the holder), its create revision as the
// token, its owner (as Holder reports it), and when its lease expires
// unless kept alive. When readers hold a name (AcquireShared), it reports
// each of them instead, with Shared set, by token: the readers' keys
// created before every other key of the name. Locks taken with `etcdctl
// lock` under the prefix are listed too, without an owner, and leaders
// elected with `etcdctl elect`, with their value. Since is not known to
// etcd and is left zero.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.cfg.prefix+escapeKey(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, b.sortErr(ctx, rctx, err)
	}
	owners := map[int64]string{}
	keys := map[string][]int{} // lock name -> indexes in resp.Kvs of its keys
	for i, kv := range resp.Kvs {
		k := string(kv.Key)[len(b.cfg.prefix):]
		if rest, ok := strings.CutPrefix(k, ownerDir); ok {
			if id, err := strconv.ParseInt(rest, 16, 64); err == nil {
				owners[id] = string(kv.Value)
			}
			continue
		}
		if strings.HasPrefix(k, "%00") {
			continue // a permit's (see permitDir): no lock name starts with "%00"
		}
		slash := strings.LastIndexByte(k, '/')
		if slash <= 0 {
			continue // not a lock key
		}
		name := k[:slash]
		keys[name] = append(keys[name], i)
	}
	// The holders of each name: the key created first, or the readers'
	// keys created before every other key.
	var held []int
	for _, idx := range keys {
		slices.SortFunc(idx, func(i, j int) int { return cmp.Compare(resp.Kvs[i].CreateRevision, resp.Kvs[j].CreateRevision) })
		if !isShared(resp.Kvs[idx[0]].Key) {
			held = append(held, idx[0])
			continue
		}
		for _, i := range idx {
			if !isShared(resp.Kvs[i].Key) {
				break
			}
			held = append(held, i)
		}
	}
	// The owner keys of sessions were outside the range when prefix was
	// not empty; read those of the holders.
	if prefix != "" && len(held) > 0 {
		ors, err := b.cli.Get(rctx, b.cfg.prefix+ownerDir, clientv3.WithPrefix())
		if err != nil {
			return nil, b.sortErr(ctx, rctx, err)
		}
		for _, kv := range ors.Kvs {
			if id, err := strconv.ParseInt(string(kv.Key)[len(b.cfg.prefix)+len(ownerDir):], 16, 64); err == nil {
				owners[id] = string(kv.Value)
			}
		}
	}

	holders := make([]driver.Holder, 0, len(held))
	leases := map[int64][]int{} // lease ID -> indexes in holders
	for _, i := range held {
		kv := resp.Kvs[i]
		shared := isShared(kv.Key)
		owner := string(kv.Value) // an election's candidate: its value
		if owner == "" || shared {
			owner = owners[kv.Lease]
		}
		k := string(kv.Key)[len(b.cfg.prefix):]
		holders = append(holders, driver.Holder{
			Key:    unescapeKey(k[:strings.LastIndexByte(k, '/')]),
			Token:  uint64(kv.CreateRevision),
			Owner:  owner,
			Shared: shared,
		})
		if kv.Lease != 0 {
			leases[kv.Lease] = append(leases[kv.Lease], len(holders)-1)
		}
	}
	b.fillExpiry(rctx, holders, leases)
	slices.SortFunc(holders, func(a, b driver.Holder) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if a.Shared != b.Shared {
			if a.Shared {
				return 1 // the exclusive holder first
			}
			return -1
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return holders, nil
}

// fillExpiry asks etcd how long each holder's lease has left. A lease whose
// time cannot be read leaves Expires zero: List is informational.
func (b *Backend) fillExpiry(ctx context.Context, holders []driver.Holder, leases map[int64][]int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for id, idx := range leases {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sent := time.Now()
			r, err := b.cli.TimeToLive(ctx, clientv3.LeaseID(id))
			if err != nil || r.TTL < 0 {
				return
			}
			exp := sent.Add(time.Duration(r.TTL) * time.Second)
			mu.Lock()
			for _, i := range idx {
				holders[i].Expires = exp
			}
			mu.Unlock()
		})
	}
	wg.Wait()
}

// ownerKey is where a session records its owner.
func (b *Backend) ownerKey(id clientv3.LeaseID) string {
	return fmt.Sprintf("%s%s%x", b.cfg.prefix, ownerDir, int64(id))
}
