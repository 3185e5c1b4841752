//go:build unix

package cli

import "os"

// relayedSignals are the signals that partition forwards to every unit's
// command: those run forwards, but the ones that end distlock
// (waitSignals), which end every command instead.
func relayedSignals() []os.Signal {
	var sigs []os.Signal
	for _, s := range forwardSignals {
		if !isWaitSignal(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}
