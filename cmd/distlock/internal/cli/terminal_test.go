//go:build linux

package cli_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// pty is a pseudo-terminal running a shell (the harness) as the leader of
// its session, as a terminal emulator or sshd runs a login shell.
type pty struct {
	master *os.File
	shell  *exec.Cmd
	out    syncBuffer    // what the terminal shows
	copied chan struct{} // closed when out has it all
}

// startPty runs script with shell (sh or bash) on a new terminal, with
// the test's distlock as $DL.
func (e *env) startPty(shell, script string) *pty {
	e.t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		e.t.Skipf("no pseudo-terminals: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		e.t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		e.t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer slave.Close()
	p := &pty{master: master, copied: make(chan struct{})}
	p.shell = exec.Command(shell, "-c", script)
	p.shell.Env = append(e.command().Env, "DL="+bin)
	p.shell.Stdin, p.shell.Stdout, p.shell.Stderr = slave, slave, slave
	p.shell.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := p.shell.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer close(p.copied)
		io.Copy(&p.out, master) // until the last process on the terminal closes it
	}()
	e.t.Cleanup(func() {
		// Whatever runs on the terminal still (after a failure) keeps it
		// open: kill the session.
		killSession(p.shell.Process.Pid)
		if p.shell.ProcessState == nil {
			p.shell.Wait()
		}
		master.Close()
		<-p.copied
	})
	return p
}

// foreground returns the terminal's foreground process group.
func (p *pty) foreground(t *testing.T) int {
	t.Helper()
	pg, err := unix.IoctlGetInt(int(p.master.Fd()), unix.TIOCGPGRP)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// wait waits for the harness shell to end.
func (p *pty) wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { p.shell.Wait(); close(done) }()
	waitFor(t, "the harness shell to end", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if !p.shell.ProcessState.Success() {
		t.Errorf("harness: %v; terminal: %q", p.shell.ProcessState, p.out.String())
	}
}

// In a terminal, with distlock run as a job of its own by an interactive
// shell, the command's process group is the foreground group while it
// runs, so that Ctrl-C reaches it once, from the terminal, and not a
// second time through distlock, which is not in that group. The terminal
// is given back to distlock's group when the command ends.
func TestTerminalForegroundAndCtrlC(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash for job control")
	}
	e := newEnv(t)
	log, pidFile, out, stat := e.path("log"), e.path("pid"), e.path("out"), e.path("stat")
	cmdScript := fmt.Sprintf(`trap "echo INT >> %[1]s" INT; trap "echo USR1 >> %[1]s; exit 3" USR1; `+
		`echo $$ > %[2]s; while :; do sleep 0.02; done`, log, pidFile)
	p := e.startPty("bash", fmt.Sprintf(`set -m
"$DL" run k -- sh -c %s; echo "$? $(cut -d' ' -f8 /proc/$$/stat) $$" > %s
"$DL" run k -- sh -c 'cut -d" " -f5,8 /proc/$$/stat' < /dev/null > %s`, sh(cmdScript), sh(out), sh(stat)))
	pid := readInt(t, pidFile)
	dl := childOf(t, p.shell.Process.Pid, "distlock")
	_, _, cmdGroup, _ := procStat(pid)
	_, _, dlGroup, _ := procStat(dl)
	if fg := p.foreground(t); cmdGroup != pid || fg != cmdGroup || fg == dlGroup {
		t.Fatalf("command %d in group %d, distlock %d in group %d, terminal's foreground group %d; "+
			"want the command leading its own group, in the foreground", pid, cmdGroup, dl, dlGroup, fg)
	}
	p.master.Write([]byte{3}) // Ctrl-C
	waitFor(t, "the command to get SIGINT", func() bool { b, _ := os.ReadFile(log); return len(b) > 0 })
	// A SIGINT distlock forwarded would come before this SIGUSR1.
	syscall.Kill(dl, syscall.SIGUSR1)
	p.wait(t)
	if b, _ := os.ReadFile(log); string(b) != "INT\nUSR1\n" {
		t.Errorf("signals the command got: %q, want one SIGINT, then the SIGUSR1", b)
	}
	var code, fg, shell int
	if b, err := os.ReadFile(out); err != nil {
		t.Fatalf("%v; terminal: %q", err, p.out.String())
	} else if _, err := fmt.Sscan(string(b), &code, &fg, &shell); err != nil || code != 3 || fg != shell {
		t.Errorf("after distlock: exit %d, foreground group %d, shell's group %d (%q); want 3 and the terminal back with the shell",
			code, fg, shell, b)
	}
	// The terminal on standard error only (input and output redirected):
	// the same.
	var group int
	if b, _ := os.ReadFile(stat); !(func() bool { _, err := fmt.Sscan(string(b), &group, &fg); return err == nil })() || group != fg {
		t.Errorf("with the terminal on standard error only, the command's group and the foreground group: %q; want them equal", b)
	}
}

// Ctrl-Z stops the job as a shell's job control expects: distlock stops
// too and the shell gets the terminal; `fg` gives it back to the command,
// which goes on. distlock in the background of a terminal leaves the
// terminal alone.
func TestTerminalJobControl(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash for job control")
	}
	e := newEnv(t)
	pidFile, fifo, resume, stat, out1, out2 := e.path("pid"), e.path("fifo"), e.path("resume"), e.path("stat"), e.path("out1"), e.path("out2")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The command waits in its shell (no child: a shell in vfork waits
	// for its child without stopping), until the test writes to the fifo.
	cmdScript := fmt.Sprintf(`echo $$ > %s; read x < %s; cut -d" " -f5,8 /proc/$$/stat > %s; exit 4`, pidFile, fifo, stat)
	p := e.startPty("bash", fmt.Sprintf(`set -m
"$DL" run k -- sh -c %[1]s
echo $? > %[2]s
while [ ! -e %[3]s ]; do sleep 0.02; done
fg
echo "$? $(cut -d' ' -f8 /proc/$$/stat) $$" > %[4]s
"$DL" run k -- sh -c 'cut -d" " -f5,8 /proc/$$/stat' > %[5]s &
wait $!
echo "$? $(cut -d' ' -f8 /proc/$$/stat) $$" >> %[5]s`, sh(cmdScript), out1, resume, out2, sh(stat+".bg")))
	pid := readInt(t, pidFile)
	dl := childOf(t, p.shell.Process.Pid, "distlock")
	p.master.Write([]byte{0x1a}) // Ctrl-Z
	stoppedCode := readInt(t, out1)
	if stoppedCode != 128+int(syscall.SIGTSTP) {
		t.Fatalf("the shell's status of the job after Ctrl-Z: %d, want %d (stopped)", stoppedCode, 128+syscall.SIGTSTP)
	}
	if st, _, _, _ := procStat(dl); st != 'T' {
		t.Errorf("distlock's state after Ctrl-Z: %c, want T (stopped)", st)
	}
	if st, _, _, _ := procStat(pid); st != 'T' {
		t.Errorf("the command's state after Ctrl-Z: %c, want T (stopped)", st)
	}
	// The shell has the terminal (or the job it runs next has it: with job
	// control, each of its commands does).
	if _, _, dlGroup, _ := procStat(dl); p.foreground(t) == pid || p.foreground(t) == dlGroup {
		fg := p.foreground(t)
		t.Errorf("terminal's foreground group after Ctrl-Z: %d, the stopped job's (command %d, distlock %d)", fg, pid, dlGroup)
	}
	os.WriteFile(resume, nil, 0o600) // fg
	waitFor(t, "the command to have the terminal again", func() bool { return p.foreground(t) == pid })
	var w *os.File
	waitFor(t, "the command to read the fifo", func() bool {
		var err error
		w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		return err == nil
	})
	w.WriteString("go\n")
	w.Close()
	p.wait(t)
	var group, fg, code, shell int
	if b, err := os.ReadFile(stat); err != nil {
		t.Fatalf("%v; terminal: %q", err, p.out.String())
	} else if fmt.Sscan(string(b), &group, &fg); group != pid || fg != pid {
		t.Errorf("after fg, the command's group %d and the foreground group %d, want both %d", group, fg, pid)
	}
	if b, _ := os.ReadFile(out2); !(func() bool { _, err := fmt.Sscan(string(b), &code, &fg, &shell); return err == nil })() || code != 4 || fg != shell {
		t.Errorf("after fg: %q; want exit 4 and the terminal back with the shell", b)
	}
	// In the background: the terminal stays with the shell.
	var bgGroup, bgFg, bgCode, bgTerm, bgShell int
	b, _ := os.ReadFile(stat + ".bg")
	if _, err := fmt.Sscan(string(b), &bgGroup, &bgFg, &bgCode, &bgTerm, &bgShell); err != nil || bgCode != 0 || bgFg == bgGroup || bgTerm != bgShell {
		t.Errorf("distlock in the background: %q; want the command not in the foreground, exit 0, the terminal with the shell", b)
	}
}

// A terminal whose foreground group distlock shares with other processes
// (a script's shell, without job control, or a pipeline) stays with that
// group: Ctrl-C reaches the shell and distlock, which forwards it to the
// command's group, once; Ctrl-Z is relayed the same way and suspends the
// job and distlock, which SIGCONT resumes.
func TestTerminalSharedGroup(t *testing.T) {
	e := newEnv(t)
	log, pidFile, out := e.path("log"), e.path("pid"), e.path("out")
	cmdScript := fmt.Sprintf(`trap "echo INT >> %[1]s" INT; trap "echo USR1 >> %[1]s; exit 3" USR1; `+
		`echo $$ > %[2]s; while :; do sleep 0.02; done`, log, pidFile)
	p := e.startPty("sh", fmt.Sprintf(`trap "echo shell INT >> %s" INT
"$DL" run k -- sh -c %s; echo "$? $(cut -d' ' -f8 /proc/$$/stat) $$" > %s`, sh(log), sh(cmdScript), sh(out)))
	pid := readInt(t, pidFile)
	dl := childOf(t, p.shell.Process.Pid, "distlock")
	_, _, cmdGroup, _ := procStat(pid)
	if fg := p.foreground(t); cmdGroup != pid || fg != p.shell.Process.Pid {
		t.Fatalf("command %d in group %d, terminal's foreground group %d; want the command leading its own group, "+
			"and the terminal with the shell's group %d", pid, cmdGroup, fg, p.shell.Process.Pid)
	}
	p.master.Write([]byte{3}) // Ctrl-C
	waitFor(t, "the command to get SIGINT", func() bool { b, _ := os.ReadFile(log); return len(b) > 0 })

	p.master.Write([]byte{0x1a}) // Ctrl-Z
	// The job is stopped: a process of its group is (the command itself,
	// or the child it is starting, which its shell waits for in vfork).
	waitFor(t, "the job and distlock to stop", func() bool {
		st, _, _, _ := procStat(dl)
		return st == 'T' && strings.Contains(groupStates(pid), "T")
	})
	syscall.Kill(dl, syscall.SIGCONT)
	waitFor(t, "the job to go on", func() bool { return !strings.Contains(groupStates(pid), "T") })

	syscall.Kill(dl, syscall.SIGUSR1) // a SIGINT distlock forwarded twice would come before
	p.wait(t)
	if b, _ := os.ReadFile(log); string(b) != "INT\nUSR1\nshell INT\n" {
		t.Errorf("signals: %q, want the command's one SIGINT and the SIGUSR1, then the shell's SIGINT", b)
	}
	var code, fg, shell int
	if b, err := os.ReadFile(out); err != nil {
		t.Fatalf("%v; terminal: %q", err, p.out.String())
	} else if _, err := fmt.Sscan(string(b), &code, &fg, &shell); err != nil || code != 3 || fg != shell {
		t.Errorf("after distlock: %q; want exit 3 and the terminal with the shell", b)
	}
}

// killSession kills the processes of session sid.
func killSession(sid int) {
	dir, _ := os.ReadDir("/proc")
	for _, d := range dir {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 3 && f[3] == strconv.Itoa(sid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// groupStates returns the states of the processes of group pgid.
func groupStates(pgid int) string {
	var states []byte
	dir, _ := os.ReadDir("/proc")
	for _, d := range dir {
		if pid, err := strconv.Atoi(d.Name()); err == nil {
			if st, _, pg, ok := procStat(pid); ok && pg == pgid {
				states = append(states, st)
			}
		}
	}
	return string(states)
}
