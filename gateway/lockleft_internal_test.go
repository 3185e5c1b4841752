package gateway

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// endingLock is a lock whose local deadline passes right after the first
// question asked of it, as a real one's can between two calls.
type endingLock struct {
	deadline time.Time
	asked    bool
}

func (l *endingLock) ended() bool { e := l.asked; l.asked = true; return e }

func (l *endingLock) Err() error {
	if l.ended() {
		return distlock.ErrDeadlinePassed
	}
	return nil
}

func (l *endingLock) Deadline() (time.Time, bool) {
	if l.ended() {
		return time.Time{}, false // as distlock.Lock answers once it ended
	}
	return l.deadline, true
}

// The time left of a lock that ends while it is read is never more than
// its deadline allowed.
func TestLockLeftOfALockEndingMeanwhile(t *testing.T) {
	l := &endingLock{deadline: time.Now().Add(time.Second)}
	if got := lockLeft(time.Minute, l); got > time.Second {
		t.Errorf("time left %v of a lock with %v left at most", got, time.Second)
	}
}
