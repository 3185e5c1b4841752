//go:build !linux

package testserver

import (
	"testing"
	"time"
)

func mapOffset(t testing.TB, _ string) (func(time.Duration), error) {
	t.Skip("testserver: a movable clock needs Linux (LD_PRELOAD of a shim)")
	return nil, nil
}
