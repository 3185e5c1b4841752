package zklock

import "github.com/distlock/distlock/backends"

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string { return []string{"zk"} }

// A program that imports this package opens its URLs with backends.Open.
func init() { backends.Register(backends.OpenerOf(OpenURL), Schemes()...) }
