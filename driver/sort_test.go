package driver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

var errRefused = errors.New("refused")

// Every backend's errors are sorted by one rule, in one order.
func TestSorter(t *testing.T) {
	s := driver.Sorter{Pkg: "somelock", Permanent: func(err error) bool { return errors.Is(err, errRefused) }, RequestTimeout: 3 * time.Second}
	live := context.Background()
	cause := errors.New("shutting down")
	ended, cancel := context.WithCancelCause(live)
	cancel(cause)
	timedOut, cancel2 := context.WithTimeout(live, 0)
	defer cancel2()
	<-timedOut.Done()
	closed := driver.ClosedError("somelock")
	netErr := errors.New("connection reset")

	for _, c := range []struct {
		name      string
		ctx, rctx context.Context
		op        string
		err       error
		match     []error
		notMatch  []error
		text      string
	}{
		{name: "nil", ctx: live, err: nil},
		{name: "transient", ctx: live, err: netErr, match: []error{driver.ErrUnavailable, netErr}, text: "distlock: service unavailable: somelock: connection reset"},
		{name: "transient with op", ctx: live, op: "list", err: netErr, match: []error{driver.ErrUnavailable}, text: "distlock: service unavailable: somelock: list: connection reset"},
		{name: "permanent", ctx: live, err: errRefused, match: []error{errRefused}, notMatch: []error{driver.ErrUnavailable}, text: "somelock: refused"},
		{name: "closed", ctx: live, err: closed, match: []error{driver.ErrClosed}, notMatch: []error{driver.ErrUnavailable}, text: "somelock: backend closed"},
		{name: "caller's context ended", ctx: ended, err: netErr, match: []error{context.Canceled, cause, netErr}, notMatch: []error{driver.ErrUnavailable}, text: "somelock: context canceled: shutting down: connection reset"},
		{name: "error of the ended context", ctx: ended, err: context.Cause(ended), match: []error{context.Canceled, cause}, notMatch: []error{driver.ErrUnavailable}, text: "somelock: context canceled: shutting down"},
		{name: "error of the context and its cause", ctx: ended, err: fmt.Errorf("%w: %w", context.Canceled, cause), match: []error{context.Canceled, cause}, text: "somelock: context canceled: shutting down"},
		{name: "context ended before the permanent", ctx: ended, err: errRefused, match: []error{context.Canceled}},
		{name: "request timeout", ctx: live, rctx: timedOut, err: netErr, match: []error{driver.ErrUnavailable}, notMatch: []error{context.DeadlineExceeded, netErr}, text: "distlock: service unavailable: somelock: no answer within 3s: connection reset"},
		{name: "no package name", ctx: live, err: netErr, text: "distlock: service unavailable: connection reset"},
		{name: "no context", ctx: nil, err: netErr, match: []error{driver.ErrUnavailable}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := s
			if c.name == "no package name" {
				s.Pkg = ""
			}
			got := s.Sort(c.ctx, c.rctx, c.op, c.err)
			if c.err == nil {
				if got != nil {
					t.Fatalf("Sort(nil) = %v", got)
				}
				return
			}
			for _, m := range c.match {
				if !errors.Is(got, m) {
					t.Errorf("%v does not match %v", got, m)
				}
			}
			for _, m := range c.notMatch {
				if errors.Is(got, m) {
					t.Errorf("%v matches %v", got, m)
				}
			}
			if c.text != "" && got.Error() != c.text {
				t.Errorf("text %q, want %q", got, c.text)
			}
			if strings.Count(got.Error(), "somelock") > 1 {
				t.Errorf("the package is named twice: %q", got)
			}
		})
	}
}
