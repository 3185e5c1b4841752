//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock/driver"
)

// info describes the holder of a key. The holder writes it next to the lock
// file after it is granted and removes it when it releases; a holder that
// dies leaves it behind, so readers trust it only while the lock file is
// locked and the tokens agree.
type info struct {
	Key   string    `json:"key"`
	Token infoToken `json:"token"`
	Owner string    `json:"owner,omitempty"`
	PID   int       `json:"pid"`
	Host  string    `json:"host,omitempty"`
	Since time.Time `json:"since"`
}

// infoToken is a fencing token in a holder description: written as a string
// of decimal digits, as every JSON of distlock writes tokens (a JSON
// number above 2^53 loses digits in JavaScript, and the file is there for
// anyone to read); read from such a string or, as earlier builds wrote
// it, from a number.
type infoToken uint64

func (t infoToken) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, strconv.FormatUint(uint64(t), 10)), nil
}

func (t *infoToken) UnmarshalJSON(data []byte) error {
	s := string(data)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("filelock: token %s: want decimal digits", data)
	}
	*t = infoToken(v)
	return nil
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

// maxInfo bounds the size of a holder description that readInfo reads.
const maxInfo = 1 << 20

// readInfo returns the holder description of name, if there is a valid
// one. It reads a regular file only, and at most maxInfo bytes: whoever
// can write to the directory could have put a FIFO there, or a link to
// /dev/zero, to hang or exhaust a listing.
func (b *Backend) readInfo(name string) (info, bool) {
	f, err := openRegular(filepath.Join(b.dir, name+infoSuffix))
	if err != nil || f == nil {
		return info{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxInfo+1))
	if err != nil || len(data) > maxInfo {
		return info{}, false
	}
	var in info
	if json.Unmarshal(data, &in) != nil {
		return info{}, false
	}
	return in, true
}

// ListError is the error of a List that could not tell whether some lock
// files are held; List returns it together with the holders among the
// lock files it could read. Unread holds an error for each lock file, or
// reader's description (see AcquireShared), that could not be opened or
// probed (permission denied, an I/O error), whose path it names, sorted by
// the path of the key's lock file. Read is the number of lock files under
// the prefix that List could read, held or not: 0 means that nothing
// could be listed, and a caller may then treat the listing as failed.
type ListError struct {
	Unread []error
	Read   int
}

func (e *ListError) Error() string {
	msgs := make([]string, len(e.Unread))
	for i, err := range e.Unread {
		msgs[i] = err.Error()
	}
	files := "1 lock file is"
	if len(e.Unread) != 1 {
		files = fmt.Sprintf("%d lock files are", len(e.Unread))
	}
	return fmt.Sprintf("filelock: cannot tell whether %s held: %s", files, strings.Join(msgs, "; "))
}

// Unwrap returns Unread.
func (e *ListError) Unwrap() []error { return e.Unread }

// List implements driver.Lister: the keys with prefix whose lock file is
// locked now, with the token, owner and start of the current grant: the
// exclusive holder of a key, then its shared grants (Shared set) by
// token, read from their descriptions as Readers reads them. Expires is
// always zero: grants have no time bound.
//
// To tell a held key from a stale description left by a dead holder, List
// briefly takes a shared, non-blocking flock on each candidate lock file: a
// single try to acquire that key at that very instant (TryAcquire, or
// `distlock run --no-wait`) can then find it held. Waiters are not affected.
//
// One lock file that cannot be read does not hide the others: List lists
// what it can and returns a *ListError, with the holders, naming the lock
// files it could not read. Entries that no key can be held through are
// passed over: a directory or a symbolic link named like a lock file, or
// anything but a regular file (Acquire refuses them). A lock file whose
// token counter is corrupt is listed with the token of its holder's
// description, if any, else 0.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, fileErr("list lock directory", err)
	}
	var (
		hs     []driver.Holder
		unread []error
		read   int
	)
	// The tokens of the readers' descriptions, by the name of their key.
	readers := map[string][]uint64{}
	for _, e := range entries {
		if name, token, ok := readerOf(e.Name()); ok && e.Type().IsRegular() {
			readers[name] = append(readers[name], token)
		}
	}
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
		h, state, _, err := b.probe(name)
		switch {
		case err != nil:
			unread = append(unread, err)
			continue
		case state == probeGone || !strings.HasPrefix(h.Key, prefix):
			continue
		case state == probeHeld:
			hs = append(hs, h)
		}
		read++
		if tokens := readers[name]; len(tokens) > 0 {
			rs, errs := b.readersOf(h.Key, name, tokens)
			hs = append(hs, rs...)
			unread = append(unread, errs...)
		}
	}
	// By key; a key's exclusive holder first, then its readers by token.
	slices.SortFunc(hs, func(a, b driver.Holder) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if a.Shared != b.Shared {
			if !a.Shared {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Token, b.Token)
	})
	if len(unread) > 0 {
		// ReadDir sorts by name: so are the errors (a key's readers'
		// after its lock file's).
		return hs, &ListError{Unread: unread, Read: read}
	}
	return hs, nil
}

// The states of a lock file that probe found.
const (
	probeGone = iota // removed, or not a regular file: nothing can hold it
	probeFree
	probeHeld
)

// probe reports whether the lock file of name is held, and by whom; with
// probeFree, h.Key is set when the file names its key. described is
// whether the holder's description confirms the token: without it, a
// grant or a release is in progress (or the holder could not write its
// description) and the token is the counter's, which may be the grant's
// before. An error names the lock file.
func (b *Backend) probe(name string) (h driver.Holder, state int, described bool, err error) {
	f, err := openRegular(filepath.Join(b.dir, name+lockSuffix))
	if err != nil || f == nil {
		return h, probeGone, false, err
	}
	defer f.Close()
	key, ok := readKey(f)
	if !ok {
		if key, ok = keyOfName(name); !ok {
			key = name // a hashed name whose key was never recorded
		}
	}
	h.Key = key
	free, err := flock(f, flockSH|flockNB)
	if err != nil {
		return h, probeGone, false, err
	}
	if free {
		flock(f, flockUN)
		return h, probeFree, false, nil
	}
	h.Token, _ = readCounter(f)
	// A description with an older token is a dead holder's; a newer one means
	// the counter was read in the middle of the holder's update.
	if in, ok := b.readInfo(name); ok && in.Key == key && uint64(in.Token) >= h.Token {
		h.Token, h.Owner, h.Since = uint64(in.Token), in.Owner, in.Since
		described = true
	}
	return h, probeHeld, described, nil
}

// openRegular opens path for reading if it is a regular file (not through
// a symbolic link); it returns a nil file, and no error, if there is none.
// Opening does not block on a FIFO.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, err
	}
	return f, nil
}

// String describes the Backend for logs.
func (b *Backend) String() string { return fmt.Sprintf("filelock(%s)", b.dir) }
