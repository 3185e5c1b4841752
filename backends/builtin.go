package backends

import (
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/zklock"
)

// The network backends. A new backend adds itself here (or in a file of
// its own) with one line: its OpenURL and its schemes.
func init() {
	Register(adapt(redislock.OpenURL), redislock.Schemes()...)
	Register(adapt(etcdlock.OpenURL), etcdlock.Schemes()...)
	Register(adapt(zklock.OpenURL), "zk")
	Register(adapt(pglock.OpenURL), "postgres", "postgresql")
	Register(adapt(gatewaylock.OpenURL), gatewaylock.Schemes()...)
}
