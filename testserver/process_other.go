//go:build !unix

package testserver

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

var (
	sigStop os.Signal = nil
	sigCont os.Signal = nil
)

type runAsUser struct{ name string }

func sysProcAttr(*runAsUser) *syscall.SysProcAttr { return nil }

func killTree(p *os.Process) []int { _ = p.Kill(); return nil }

func procGone(int) bool { return true }

func signalGroup(p *os.Process, sig os.Signal) error {
	if sig == nil {
		return errors.New("testserver: pause/resume is not supported on this platform")
	}
	return p.Signal(sig)
}

func lookupRunAs(string) (*runAsUser, error) { return nil, nil }

func giveTo(*runAsUser, string) error { return nil }

func waitStopped(int, time.Time) error { return nil }

// DialedBy is not implemented outside Linux: it returns -1.
func DialedBy(net.Conn, ...*Process) int { return -1 }
