package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
	"github.com/distlock/distlock/cmd/distlock/internal/cli/supervisor"
)

// version is set at link time (-ldflags "-X .../internal/cli.version=v1.2.3");
// otherwise the module version from the build information is used.
var version string

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Option configures one Run.
type Option func(*runner)

// WithStdio sets the standard streams of distlock and of the commands it
// runs. Default: the process's own.
func WithStdio(stdin io.Reader, stdout, stderr io.Writer) Option {
	return func(r *runner) { r.stdin, r.stdout, r.stderr = stdin, stdout, stderr }
}

// WithGetenv sets how distlock reads its environment (DISTLOCK_BACKEND).
// Default: os.Getenv. Commands run by `distlock run` get the process's own
// environment either way, with DISTLOCK_BACKEND set to the lock service
// used, its password taken out.
func WithGetenv(getenv func(string) string) Option { return func(r *runner) { r.getenv = getenv } }

// WithOpener adds (or replaces) the opener of a URL scheme for one Run, for
// example to run distlock in-process over a test backend. Default: the
// schemes wired into this build.
func WithOpener(scheme string, open Opener) Option {
	return func(r *runner) { r.openers[scheme] = open }
}

// runner is one invocation of distlock.
type runner struct {
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	getenv  func(string) string
	openers map[string]Opener

	// Global flags.
	backendURL string
	verbose    bool
	log        *slog.Logger
}

// Run runs the distlock command line args (without the program name) and
// returns the exit code; see the table at ExitOK. It never calls os.Exit
// and may be called several times, also concurrently, in one process,
// although the signals it forwards are the process's.
//
// `distlock run` starts its command through a supervisor, which is this
// same executable run again with SupervisorCommand as its first argument:
// a program that calls Run must pass such invocations to Run (as Main
// does).
func Run(ctx context.Context, args []string, opts ...Option) int {
	code, _ := run(ctx, args, opts...)
	return code
}

// Main runs distlock with the arguments of the process and ends the
// process: it exits with the code Run would return, except that, when the
// command died of SIGHUP, SIGINT, SIGQUIT or SIGTERM (or one of them ended
// the wait for the lock), it kills the process with that same signal, after
// the lock was released, where it can (on Linux); see ExitOK.
func Main() {
	code, sig := run(context.Background(), os.Args[1:])
	if sig != 0 {
		dieOf(sig) // returns if the signal did not end the process
	}
	os.Exit(code)
}

// SupervisorCommand is the hidden first argument with which `distlock run`
// starts itself as the supervisor of the command it runs. It is not a
// command for users and does not appear in the help.
const SupervisorCommand = standby.Command

func run(ctx context.Context, args []string, opts ...Option) (int, syscall.Signal) {
	if len(args) > 0 && args[0] == SupervisorCommand {
		return supervisor.Main(args[1:]), 0
	}
	r := &runner{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		openers: maps.Clone(registry)}
	for _, o := range opts {
		o(r)
	}
	root := r.rootCommand()
	root.SetArgs(args)
	root.SetIn(r.stdin)
	root.SetOut(r.stdout)
	root.SetErr(r.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	code, msg, usage, sig := codeOf(err)
	if msg != "" {
		fmt.Fprintf(r.stderr, "distlock: %s\n", strings.TrimPrefix(msg, "distlock: "))
		if usage && cmd != nil {
			fmt.Fprintf(r.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return code, sig
}

func (r *runner) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "distlock",
		Short: "Run commands under locks that stay safe when things go wrong",
		Long: `distlock runs a command while holding a lock, on this host (the default,
file://` + defaultDirHelp() + `) or on a lock service, and gives the command
the lock's fencing token. It also runs a command while leading an
election (elect), with the term's token, shows an election's leader
(leader), and shares units of work among the members of a group, running
a command for each unit a member owns (partition).

` + wrap("Lock services (--backend URL): "+schemes(r.openers)+".", 76) + `

Exit codes: 64 usage, 69 lock service failed, 70 internal error, 75 lock not
acquired (held or timed out), 76 lock (or term) lost while the command
ran, 1 no leader (leader); otherwise the command's own status, 126/127
when it cannot be run, 128+n when killed by signal n (distlock then dies
of the same signal, for SIGHUP, SIGINT, SIGQUIT and SIGTERM).`,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(r.stderr)
			cmd.Help()
			return exitWith(usagef("a command is required (run, elect, leader, partition, status or serve)"))
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("backend") {
				r.backendURL = r.getenv("DISTLOCK_BACKEND")
			}
			level := slog.LevelWarn
			if r.verbose {
				level = slog.LevelDebug
			}
			r.log = slog.New(slog.NewTextHandler(r.stderr, &slog.HandlerOptions{Level: level}))
			return nil
		},
	}
	root.SetVersionTemplate("distlock {{.Version}}\n")
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&r.backendURL, "backend", "",
		"lock service URL (default $DISTLOCK_BACKEND, else file://"+defaultDirHelp()+")")
	pf.BoolVarP(&r.verbose, "verbose", "v", false, "log what distlock does to standard error")
	root.AddCommand(r.runCommand(), r.electCommand(), r.leaderCommand(), r.partitionCommand(), r.statusCommand(), r.serveCommand())
	return root
}

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > width {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
