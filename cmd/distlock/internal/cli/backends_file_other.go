//go:build !unix

package cli

import (
	"context"
	"io"
	"runtime"

	"github.com/distlock/distlock/driver"
)

func init() { registry["file"] = openFile }

func openFile(context.Context, string) (driver.Backend, io.Closer, error) {
	return nil, nil, usagef("the file:// backend is not supported on %s; name a lock service with --backend", runtime.GOOS)
}

// describeFile names a file backend; there is none here.
func describeFile(driver.Backend) (string, bool) { return "", false }

// unreadFiles: there are no lock files here.
func unreadFiles(error) (unread []error, listed, ok bool) { return nil, false, false }

// defaultDirHelp names the default lock directory in the help.
func defaultDirHelp() string { return " (not supported on " + runtime.GOOS + ")" }

// missingLockDir: there are no lock directories here.
func missingLockDir(string) (string, bool) { return "", false }
