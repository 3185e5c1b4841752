package torture

import "time"

// Clock is the single clock of a run: every event of a history is stamped
// by the harness process, in nanoseconds of its monotonic clock since the
// run began. Worker processes never stamp events themselves, so no two
// clocks are ever compared in a history. (One check outside the history,
// election/pause's, compares two instants that workers read on the
// machine's wall clock, which all processes of the run share.) It is safe
// for concurrent use.
type Clock struct {
	start time.Time
}

// NewClock returns a clock that reads 0 now.
func NewClock() *Clock { return &Clock{start: time.Now()} }

// Now returns the time since the clock started, in nanoseconds.
func (c *Clock) Now() int64 { return int64(time.Since(c.start)) }
