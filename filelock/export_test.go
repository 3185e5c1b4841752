//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"os"
	"testing"
)

// CheckPrivate exposes the check of the default directory to the tests,
// which must not change the permissions of the real one.
var CheckPrivate = checkPrivate

// SetFloor makes floor the least next token until the test ends; with 0,
// tokens are plain counters.
func SetFloor(t testing.TB, floor uint64) {
	old := floorNow
	floorNow = func() uint64 { return floor }
	t.Cleanup(func() { floorNow = old })
}

// Slots returns the tokens in the two slots of a lock file (0 where a slot
// is not valid).
func Slots(path string) (a, b uint64, err error) {
	buf, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	if len(buf) < keyOffset {
		return 0, 0, nil
	}
	a, _, _ = decodeSlot(buf[:slotSize])
	b, _, _ = decodeSlot(buf[slotSize:keyOffset])
	return a, b, nil
}

// Queued returns the number of keys whose turn an acquirer of b has or
// awaits.
func Queued(b *Backend) int { return b.queue.Len() }

// Waiting returns the number of acquirers of key waiting for its turn,
// besides the one that has it.
func Waiting(b *Backend, key string) int { return b.queue.Waiting(fileName(key)) }
