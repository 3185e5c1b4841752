package redislock

import (
	"regexp"
	"testing"
)

// Every script builds (they are built on first use, not at init): its
// markers are in place, and its hash is a SHA-1's.
func TestScriptsBuild(t *testing.T) {
	sha1 := regexp.MustCompile(`^[0-9a-f]{40}$`)
	for name, s := range map[string]func() *script{
		"acquire": acquireScript, "release": releaseScript,
		"permit_acquire": permitAcquire, "permit_release": permitRelease, "permit_refresh": permitRefresh, "permit_state": permitState,
		"shared_acquire": sharedAcquire, "shared_release": sharedRelease, "shared_refresh": sharedRefresh,
	} {
		if h, _ := s().hash.(string); !sha1.MatchString(h) {
			t.Errorf("%s: hash %v", name, s().hash)
		}
	}
	marker := regexp.MustCompile(`--\[\[(queue|permits)\.lua\]\]`)
	for _, s := range []func() *script{acquireScript, releaseScript, sharedAcquire, sharedRelease, permitAcquire, permitRelease, permitRefresh, permitState} {
		if src := s().src.(string); marker.MatchString(src) {
			t.Errorf("a marker is left in %.60q...", src)
		}
	}
	if fenceExecScript().script == nil || refreshScript() == nil || refreshMany() == nil || fenceScript() == nil ||
		setOwner() == nil || watchScript() == nil || readersScript() == nil || peekScript() == nil {
		t.Error("a script is nil")
	}
}
