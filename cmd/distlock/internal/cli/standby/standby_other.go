//go:build !linux

package standby

// StartAtInit starts nothing here: without a parent-death signal, a
// standby would outlive a distlock that never used it by up to the
// supervisor's poll of its parent.
func StartAtInit([]string) {}
