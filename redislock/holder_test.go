package redislock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
)

// The holder of one key (Holder, WatchHolder, SetOwner) and the election
// suite, in each mode, against a real server: a watch is woken by the
// key's release channel.
func TestHolderAndElection(t *testing.T) {
	srv := startRedis(t)
	for _, mode := range suiteModes {
		factory := func(t *testing.T) driver.Backend { return newBackend(t, srv.Addr, mode.opts...) }
		t.Run(mode.name+"/Holder", func(t *testing.T) {
			distlocktest.RunHolder(t, factory, suiteOptions(newClient(t, srv.Addr))...)
		})
		t.Run(mode.name+"/Election", func(t *testing.T) {
			distlocktest.RunElection(t, factory, suiteOptions(newClient(t, srv.Addr))...)
		})
	}
}
