package redlock_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

func TestConformance(t *testing.T) {
	for _, n := range []int{5, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			srvs := startNodes(t, n)
			admins := make([]*testserver.Redis, n)
			copy(admins, srvs)
			distlocktest.Run(t,
				func(t *testing.T) driver.Backend { return newBackend(t, addrs(srvs)) },
				distlocktest.WithTTL(time.Second),
				distlocktest.WithRevoke(func(t *testing.T, key string) {
					// Every node drops the grant; the holder learns at its
					// next refresh.
					for _, s := range admins {
						if _, err := s.Do("DEL", lockKey(key)); err != nil {
							t.Fatalf("DEL on %s: %v", s.Addr, err)
						}
					}
				}),
				distlocktest.WithUnreachable(func(t *testing.T) driver.Backend {
					closed := make([]string, n)
					for i := range closed {
						closed[i] = closedAddr(t)
					}
					return newBackend(t, closed)
				}),
				distlocktest.WithLeakOptions(goRedisDialProbe),
			)
		})
	}
}

// closedAddr returns an address where nothing listens.
func closedAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
