package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/distlock/distlock/filelock"
)

// SvcFile is the service of the file rows: lock files on this host.
const SvcFile = "File (one host)"

// The rows of the file service, listed in Subjects.
var (
	// fileFloor is flock(2) alone: open (creating) the key's file, take
	// the flock, and on release unlock and close. No token, no holder
	// description: the least a lock between processes of one host costs.
	fileFloor = Subject{
		ID: "flock", Name: "floor: open + flock(2) LOCK_EX, unlock + close", Service: SvcFile, Kind: KindFloor,
		Settings: "a lock file per key in one directory on the local disk; waiting is a blocking flock(2), which a context does not interrupt; no fencing token",
		Measures: Latency | Throughput | Contention,
		Open: func(e *Env) (Locker, error) {
			return &flockLocker{dir: fileDir(e)}, nil
		},
	}
	// fileTokenFloor adds what a fencing token needs to fileFloor: while
	// holding the flock, read the counter in the file, write it back plus
	// one, and make it durable (fdatasync) before the grant is used.
	fileTokenFloor = Subject{
		ID: "flock-token", Name: "floor with token: flock(2) + counter pread/pwrite + fdatasync", Service: SvcFile, Kind: KindFloor,
		Settings: "as the floor above, plus an 8-byte counter in the lock file incremented and fdatasync'ed per grant (a durable fencing token)",
		Measures: Latency | Throughput | Contention,
		Open: func(e *Env) (Locker, error) {
			return &flockLocker{dir: fileDir(e), token: true}, nil
		},
	}
	// distlockFile is the CLI's default backend through a Client.
	distlockFile = Subject{
		ID: "distlock-file", Name: "distlock filelock (Client.Acquire)", Service: SvcFile, Kind: KindDistlock,
		Settings: "defaults: TTL 15s, renewal every 5s (a liveness check of the lock file); fencing token from the file's durable counter (fdatasync per grant); waiting on inotify",
		Measures: Latency | Throughput | Contention | Election | Semaphore,
		Open: func(e *Env) (Locker, error) {
			b, err := filelock.New(fileDir(e))
			if err != nil {
				return nil, err
			}
			return newDistlockLocker(b, false, func() error { return nil })
		},
	}
)

// fileDirs holds the lock directory of each Env: every instance of the file
// rows ("processes") shares it, as processes of one host share a lock
// directory.
var fileDirs sync.Map // *Env -> string

func fileDir(e *Env) string {
	if d, ok := fileDirs.Load(e); ok {
		return d.(string)
	}
	d, _ := fileDirs.LoadOrStore(e, e.tb.TempDir())
	return d.(string)
}

// flockLocker is a file floor; with token, a durable counter per grant.
type flockLocker struct {
	dir   string
	token bool
}

func (f *flockLocker) Lock(_ context.Context, key string) (Unlock, error) {
	path := filepath.Join(f.dir, strings.ReplaceAll(key, "/", "%2F")+".lock")
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: flock floor: %w", err)
	}
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err == nil && f.token {
		err = nextToken(fd)
	}
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bench: flock floor: %w", err)
	}
	return func(context.Context) error {
		err := syscall.Flock(fd, syscall.LOCK_UN)
		if cerr := syscall.Close(fd); err == nil {
			err = cerr
		}
		return err
	}, nil
}

func (f *flockLocker) Close() error { return nil }

// nextToken increments the counter at the start of fd's file and makes it
// durable.
func nextToken(fd int) error {
	var b [8]byte
	if _, err := syscall.Pread(fd, b[:], 0); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(b[:], binary.LittleEndian.Uint64(b[:])+1)
	if _, err := syscall.Pwrite(fd, b[:], 0); err != nil {
		return err
	}
	return syscall.Fdatasync(fd)
}
