package gatewaylock_test

import (
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/gatewaylock"
)

// Each problem the gateway answers matches the distlock error kind a
// caller acts on.
func TestProblemKinds(t *testing.T) {
	for _, tc := range []struct {
		status int
		kind   string
		want   error
	}{
		{409, "lock-lost", distlock.ErrLockLost},
		{404, "session-not-found", distlock.ErrUnavailable},
		{503, "unavailable", distlock.ErrUnavailable},
		{429, "too-many", distlock.ErrUnavailable},
		{429, "session-limit", gatewaylock.ErrSessionLimit},
		{400, "bad-name", distlock.ErrInvalidKey},
		{400, "bad-ttl", distlock.ErrInvalidOption},
		{401, "unauthorized", gatewaylock.ErrRefused},
		{403, "forbidden", gatewaylock.ErrRefused},
	} {
		if !gatewaylock.ProblemIs(tc.status, tc.kind, tc.want) {
			t.Errorf("%d %s does not match %v", tc.status, tc.kind, tc.want)
		}
	}
	if gatewaylock.ProblemIs(409, "not-acquired", distlock.ErrLockLost) {
		t.Errorf("409 not-acquired matches ErrLockLost")
	}
	if gatewaylock.ProblemIs(429, "session-limit", distlock.ErrUnavailable) {
		t.Errorf("429 session-limit matches ErrUnavailable, which is retried")
	}
	if gatewaylock.ProblemIs(429, "too-many", gatewaylock.ErrSessionLimit) {
		t.Errorf("429 too-many matches ErrSessionLimit")
	}
}
