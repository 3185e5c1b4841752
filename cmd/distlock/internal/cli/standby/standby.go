// Package standby starts the supervisor of `distlock run` while the rest
// of distlock is still initialising, so that the two process starts
// overlap instead of following each other.
//
// A Go program runs the initialisation of every package it links before
// main, one package after the other, and distlock links the clients of
// every lock service it supports: most of its start is that
// initialisation, and its supervisor is the same program started again.
// Package early, which the distlock command imports, calls StartAtInit
// from its init. Both import only the standard library's core, so that
// Go's initialisation order (by import path, once a package's imports are
// initialised) runs it early, before the lock services' clients: when the
// arguments ask for `run`, it starts the supervisor as a standby. The
// supervisor is run by package early's init too (package supervisor), and
// never initialises the rest of distlock: it waits on its control socket
// to be told what to run. A standby that is never told (the lock was not acquired,
// a usage error) sees the socket close when distlock exits, and exits
// without starting anything; the kernel also sends it SIGTERM then (its
// parent-death signal).
//
// Nothing here decides what runs: the supervisor gets the command, its
// environment and the lock file from distlock over the socket, after the
// lock is acquired.
package standby

import (
	"os"
	"sync"
)

// Command is the hidden first argument of the supervisor (the CLI's
// SupervisorCommand).
const Command = "__supervise"

// Descriptors of the supervisor, after its standard streams.
const (
	ReportFD  = 3 // the write end of the pipe on which it reports
	ControlFD = 4 // its end of the control socket
)

// Supervisor is a started supervisor that waits to be told what to run.
type Supervisor struct {
	Proc    *os.Process
	Report  *os.File // the read end of its report pipe
	Control *os.File // distlock's end of its control socket
}

var (
	mu       sync.Mutex
	starting chan struct{} // closed once StartAtInit's start ended; nil: none began
	waiting  *Supervisor   // started by init, not taken yet
)

// Take returns the standby supervisor that StartAtInit started, once, after
// waiting for its start to end; nil if there is none (another command
// than run, another program than distlock, a system other than Linux, a
// start that failed) or it was taken already.
func Take() *Supervisor {
	mu.Lock()
	started := starting
	mu.Unlock()
	if started != nil {
		<-started
	}
	mu.Lock()
	defer mu.Unlock()
	s := waiting
	waiting = nil
	return s
}
