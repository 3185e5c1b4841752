//go:build linux

package cli_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// With --verbose, run shows the Client's own account of trouble as it
// happens, each event once: the moment the lock comes at risk (renewals
// failing, the deadline near, before the supervisor ends the command), and
// a loss with its reason. Without --verbose, distlock says only the
// outcome.
func TestVerboseRunLogsAtRiskAndLoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   func(f *distlocktest.Faulty, srv *memlock.Backend) bool
		verbose []string // lines (key=value fields) the Client logs under --verbose
	}{
		{"Partitioned", func(f *distlocktest.Faulty, _ *memlock.Backend) bool { f.Partition("jobs/k"); return true },
			[]string{`msg="distlock: lock at risk" key=jobs/k token=1 backend=distlocktest time_left=`}},
		{"Revoked", func(_ *distlocktest.Faulty, srv *memlock.Backend) bool { return srv.Revoke("jobs/k") },
			[]string{`msg="distlock: lock lost" key=jobs/k token=1 backend=distlocktest reason=service_reported cause=`}},
	} {
		for _, verbose := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/verbose=%v", tc.name, verbose), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				srv := memlock.New()
				faulty := distlocktest.NewFaulty(srv)
				open := func(context.Context, string) (driver.Backend, io.Closer, error) {
					return faulty, io.NopCloser(nil), nil
				}
				args := []string{"--backend", "mem://", "run", "--ttl", "3s", "--grace", "200ms", "jobs/k", "--",
					"sh", "-c", fmt.Sprintf(`echo $$ > %s; exec sleep 600`, sh(dir+"/pid"))}
				if verbose {
					args = append([]string{"--verbose"}, args...)
				}
				var stderr syncBuffer
				code := make(chan int, 1)
				go func() {
					code <- cli.Run(context.Background(), args, cli.WithOpener("mem", open),
						cli.WithStdio(strings.NewReader(""), io.Discard, &stderr))
				}()
				pid := readInt(t, dir+"/pid")
				if !tc.fault(faulty, srv) {
					t.Fatal("no grant to revoke")
				}
				if c := waitCode(t, code); c != cli.ExitLockLost {
					t.Errorf("exit %d, want %d", c, cli.ExitLockLost)
				}
				waitGone(t, pid)
				log := stderr.String()
				for _, want := range tc.verbose {
					n := strings.Count(log, want)
					switch {
					case verbose && n != 1:
						t.Errorf("--verbose logged %q %d times, want once:\n%s", want, n, log)
					case !verbose && n != 0:
						t.Errorf("without --verbose, distlock logged %q:\n%s", want, log)
					}
				}
				if n := strings.Count(log, "\ndistlock: "); n != 1 && !strings.HasPrefix(log, "distlock: ") {
					t.Errorf("the outcome said %d times, want once:\n%s", n, log)
				}
			})
		}
	}
}
