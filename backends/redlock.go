package backends

import "github.com/distlock/distlock/redlock"

// The quorum of independent Redis servers.
func init() { Register(adapt(redlock.OpenURL), redlock.Schemes()...) }
