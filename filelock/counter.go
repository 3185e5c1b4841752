//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock/driver"
)

// The lock file of a key holds its token counter and the key:
//
//	[0, 16)   slot 0: token (8 bytes, big endian), CRC-32C of it, magic "dlt1"
//	[16, 32)  slot 1: the same
//	[32, ...) the key, written at the key's first grant
//
// Token n is written to slot n%2 and made durable (fdatasync) before the
// grant is returned; a new token never has the parity of the last one (see
// nextToken), so the other slot always holds the token granted before it.
// (Every version of this package keeps to slot n%2, so that two of them
// may share a lock file.) A crash in the middle of a write can tear at
// most the slot being written, whose token was therefore never granted;
// the counter is the larger valid slot.
//
// A new token is the last one plus one, or the wall clock in microseconds
// since 1970 if that is larger (see floorNow): a lock file removed while
// nobody held its key (an age-based cleaner of /var/tmp) then costs
// nothing, since the next token still exceeds every earlier one, unless
// the wall clock was set back meanwhile.
const (
	slotSize  = 16
	keyOffset = 2 * slotSize
	slotMagic = "dlt1"
)

// crc32c is the CRC-32C (Castagnoli) of b, as crc32.Checksum with the
// Castagnoli table computes it, bit by bit. A slot's 8 bytes take
// nanoseconds this way, whereas crc32.MakeTable(crc32.Castagnoli) fills
// tables over 1.5 MB of input on CPUs with SSE4.2: a fifth of a
// millisecond at the start of every program that links this package (the
// distlock command and its supervisor).
func crc32c(b []byte) uint32 {
	const poly = 0x82f63b78 // crc32.Castagnoli, reversed
	c := ^uint32(0)
	for _, x := range b {
		c ^= uint32(x)
		for range 8 {
			c = c>>1 ^ poly&-(c&1)
		}
	}
	return ^c
}

func encodeSlot(n uint64) []byte {
	b := make([]byte, slotSize)
	binary.BigEndian.PutUint64(b, n)
	binary.BigEndian.PutUint32(b[8:], crc32c(b[:8]))
	copy(b[12:], slotMagic)
	return b
}

// decodeSlot returns the token in b, whether b is valid, and whether b is
// all zero (never written).
func decodeSlot(b []byte) (n uint64, valid, zero bool) {
	zero = true
	for _, c := range b {
		if c != 0 {
			zero = false
			break
		}
	}
	if string(b[12:]) != slotMagic || binary.BigEndian.Uint32(b[8:]) != crc32c(b[:8]) {
		return 0, false, zero
	}
	return binary.BigEndian.Uint64(b), true, zero
}

// readCounter returns the last token granted from the lock file f (0 for a
// key never granted). It fails with ErrCorruptCounter rather than guess.
func readCounter(f *os.File) (uint64, error) {
	buf := make([]byte, keyOffset)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("%w: read token counter of %s: %w", driver.ErrUnavailable, f.Name(), err)
	}
	a, aok, azero := decodeSlot(buf[:slotSize])
	b, bok, bzero := decodeSlot(buf[slotSize:])
	switch {
	case aok || bok:
		return max(a, b), nil
	case azero || bzero:
		// Never written, or the first write was torn: nothing was granted.
		return 0, nil
	}
	return 0, fmt.Errorf("%w: %s", ErrCorruptCounter, f.Name())
}

// writeCounter makes n the counter of the lock file f, durably, in slot
// n%2. At a key's first grant it also records the key and makes the
// file's directory entry durable, so that the counter cannot vanish with
// an unsynced directory.
func writeCounter(f *os.File, n uint64, first bool, key string, dir string) error {
	if first {
		if _, err := f.WriteAt([]byte(key), keyOffset); err != nil {
			return fmt.Errorf("%w: write key to %s: %w", driver.ErrUnavailable, f.Name(), err)
		}
		if err := syncDir(dir); err != nil {
			return err
		}
	}
	if _, err := f.WriteAt(encodeSlot(n), int64(n%2)*slotSize); err != nil {
		return fmt.Errorf("%w: write token counter to %s: %w", driver.ErrUnavailable, f.Name(), err)
	}
	if err := datasync(f); err != nil {
		return fmt.Errorf("%w: sync token counter of %s: %w", driver.ErrUnavailable, f.Name(), err)
	}
	return nil
}

// floorNow is the least next token: the wall clock in microseconds since
// 1970 (a variable for the tests).
var floorNow = func() uint64 { return uint64(max(time.Now().UnixMicro(), 0)) }

// nextToken reads the counter of f, writes the next token and returns it.
func nextToken(f *os.File, key, dir string) (uint64, error) {
	last, err := readCounter(f)
	if err != nil {
		return 0, err
	}
	if last == math.MaxUint64 {
		return 0, fmt.Errorf("%w: %s: token counter exhausted", ErrCorruptCounter, f.Name())
	}
	next := max(last+1, floorNow())
	if last > 0 && next%2 == last%2 {
		// A jump to the floor with the last token's parity: one more, so
		// that slot n%2 is not the last token's and survives a torn write.
		if next == math.MaxUint64 {
			return 0, fmt.Errorf("%w: %s: token counter exhausted", ErrCorruptCounter, f.Name())
		}
		next++
	}
	if err := writeCounter(f, next, last == 0, key, dir); err != nil {
		return 0, err
	}
	return next, nil
}

// readKey returns the key recorded in the lock file f, if any.
func readKey(f *os.File) (string, bool) {
	buf := make([]byte, driver.MaxKeyLen+1)
	n, err := f.ReadAt(buf, keyOffset)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", false
	}
	key := string(buf[:n])
	if n > driver.MaxKeyLen || !utf8.ValidString(key) || driver.ValidateKey(key) != nil {
		return "", false
	}
	return key, true
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: open directory %s: %w", driver.ErrUnavailable, dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%w: sync directory %s: %w", driver.ErrUnavailable, dir, err)
	}
	return nil
}
