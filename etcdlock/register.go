package etcdlock

import "github.com/distlock/distlock/backends"

// A program that imports this package opens its URLs with backends.Open.
func init() { backends.Register(backends.OpenerOf(OpenURL), Schemes()...) }
