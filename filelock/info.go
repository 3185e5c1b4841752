//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock"
)

// info describes the holder of a key. The holder writes it next to the lock
// file after it is granted and removes it when it releases; a holder that
// dies leaves it behind, so readers trust it only while the lock file is
// locked and the tokens agree.
type info struct {
	Key   string    `json:"key"`
	Token uint64    `json:"token"`
	Owner string    `json:"owner,omitempty"`
	PID   int       `json:"pid"`
	Host  string    `json:"host,omitempty"`
	Since time.Time `json:"since"`
}

// writeInfo replaces the holder description of name. Only the holder of the
// key's flock calls it, so the temporary file is not shared.
func (b *Backend) writeInfo(name string, in info) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	tmp := filepath.Join(b.dir, name+tmpSuffix)
	// A file left by a holder that died while writing it is removed, and
	// the new one created afresh (O_EXCL): never written through a name
	// someone else made, such as a hard link to another file planted in a
	// sticky directory.
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, b.perm)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, filepath.Join(b.dir, name+infoSuffix))
}

func (b *Backend) readInfo(name string) (info, bool) {
	data, err := os.ReadFile(filepath.Join(b.dir, name+infoSuffix))
	if err != nil {
		return info{}, false
	}
	var in info
	if json.Unmarshal(data, &in) != nil {
		return info{}, false
	}
	return in, true
}

// List implements distlock.Lister: the keys with prefix whose lock file is
// locked now, with the token, owner and start of the current grant.
// Expires is always zero: grants have no time bound.
//
// To tell a held key from a stale description left by a dead holder, List
// briefly takes a shared, non-blocking flock on each candidate lock file: a
// single try to acquire that key at that very instant (TryAcquire, or
// `distlock run --no-wait`) can then find it held. Waiters are not affected.
func (b *Backend) List(ctx context.Context, prefix string) ([]distlock.Holder, error) {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, fileErr("list lock directory", err)
	}
	var hs []distlock.Holder
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name, ok := strings.CutSuffix(e.Name(), lockSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if key, ok := keyOfName(name); ok && !strings.HasPrefix(key, prefix) {
			continue // skip without opening the file
		}
		h, held, err := b.probe(name)
		if err != nil {
			return nil, err
		}
		if held && strings.HasPrefix(h.Key, prefix) {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b distlock.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}

// probe reports whether the lock file of name is locked, and by whom.
func (b *Backend) probe(name string) (distlock.Holder, bool, error) {
	f, err := os.OpenFile(filepath.Join(b.dir, name+lockSuffix), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if os.IsNotExist(err) {
		return distlock.Holder{}, false, nil
	}
	if err != nil {
		return distlock.Holder{}, false, fileErr("open lock file", err)
	}
	defer f.Close()
	free, err := flock(f, flockSH|flockNB)
	if err != nil {
		return distlock.Holder{}, false, fileErr("probe lock file", err)
	}
	if free {
		flock(f, flockUN)
		return distlock.Holder{}, false, nil
	}
	key, ok := readKey(f)
	if !ok {
		if key, ok = keyOfName(name); !ok {
			key = name // a hashed name whose key was never recorded
		}
	}
	h := distlock.Holder{Key: key}
	h.Token, _ = readCounter(f)
	// A description with an older token is a dead holder's; a newer one means
	// the counter was read in the middle of the holder's update.
	if in, ok := b.readInfo(name); ok && in.Key == key && in.Token >= h.Token {
		h.Token, h.Owner, h.Since = in.Token, in.Owner, in.Since
	}
	return h, true, nil
}

// String describes the Backend for logs.
func (b *Backend) String() string { return fmt.Sprintf("filelock(%s)", b.dir) }
