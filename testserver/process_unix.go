//go:build unix

package testserver

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)

// runAsUser is the identity a child process runs as.
type runAsUser struct {
	name     string
	uid, gid uint32
}

// sysProcAttr puts the child in its own process group (so signals reach all
// of its children) and, on Linux, makes it die with the test binary.
func sysProcAttr(u *runAsUser) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(a)
	if u != nil {
		a.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid}
	}
	return a
}

// killTree sends SIGKILL to the process group of p and to all descendants
// of p (which may live in other process groups), and returns the descendants.
// The group is stopped first so that it cannot fork while being killed.
func killTree(p *os.Process) []int {
	_ = syscall.Kill(-p.Pid, syscall.SIGSTOP)
	kids := descendants(p.Pid)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
	return kids
}

// signalGroup sends sig to the process group of p and to all descendants of
// p.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	for _, k := range descendants(p.Pid) {
		_ = syscall.Kill(k, s)
	}
	if err := syscall.Kill(-p.Pid, s); err != nil {
		return p.Signal(sig)
	}
	return nil
}

// lookupRunAs returns the user a server that refuses to run as root (such as
// PostgreSQL) must run as: nil when not root, otherwise the named user.
func lookupRunAs(name string) (*runAsUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root and cannot find user %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &runAsUser{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

// giveTo makes dir (recursively) owned by u and makes every parent directory
// traversable by others, so that u can reach it. It does nothing if u is nil.
func giveTo(u *runAsUser, dir string) error {
	if u == nil {
		return nil
	}
	err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(u.uid), int(u.gid))
	})
	if err != nil {
		return err
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if m := st.Mode().Perm(); m&0o001 == 0 {
			if err := os.Chmod(d, m|0o011); err != nil {
				return err
			}
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}
