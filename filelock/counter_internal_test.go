//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"encoding/hex"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// counterFile returns a fresh lock file and its directory.
func counterFile(t *testing.T) (*os.File, string) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, "k.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, dir
}

// oldNextToken is an older version's rule: token n to slot n%2, no
// floor; with tornAt it crashes in the middle of the write.
func oldNextToken(f *os.File, key, dir string, tornAt bool) (uint64, error) {
	last, err := readCounter(f)
	if err != nil {
		return 0, err
	}
	n := last + 1
	if tornAt {
		_, err := f.WriteAt([]byte("torn-write-garba"), int64(n%2)*slotSize)
		return 0, err
	}
	return n, writeCounter(f, n, n == 1, key, dir)
}

// An older binary sharing the directory (token n to slot n%2, no floor)
// after a jump to the floor: its torn write must not tear the slot holding
// the last token. (From review: with the jump written to the other slot
// whatever its parity, the old code granted 4 after 1001.)
func TestMixedVersionTornWrite(t *testing.T) {
	f, dir := counterFile(t)
	SetFloor(t, 0)
	for range 3 {
		if _, err := nextToken(f, "k", dir); err != nil {
			t.Fatal(err)
		}
	}
	SetFloor(t, 1001)
	jump, _ := nextToken(f, "k", dir) // 1002 into slot 0, beside 3
	// The old code writes 1003 to slot 1, holding 3, and tears it.
	if _, err := oldNextToken(f, "k", dir, true); err != nil {
		t.Fatal(err)
	}
	n, _ := oldNextToken(f, "k", dir, false)
	if n <= jump {
		t.Errorf("old code granted %d after %d was granted", n, jump)
	}
}

// Random grants, crashed grants (the slot being written torn, zeroed or
// cut short) and a floor that never goes back: tokens strictly increase
// and the counter never falls below the last grant. (From review.)
func TestRandomTornWrites(t *testing.T) {
	old := floorNow
	defer func() { floorNow = old }()
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		f, dir := counterFile(t)
		var floor, granted uint64
		floorNow = func() uint64 { return floor }
		for range 60 {
			if r.IntN(3) == 0 {
				floor += uint64(r.IntN(5))
			}
			last, err := readCounter(f)
			slot := int(last % 2) // the slot of the last token (0 if none)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if last < granted {
				t.Fatalf("seed %d: counter %d below granted %d", seed, last, granted)
			}
			switch r.IntN(4) {
			case 0: // crash mid-write
				junk := []byte("torn-write-garba")
				if r.IntN(2) == 0 {
					junk = make([]byte, slotSize)
				}
				f.WriteAt(junk[:1+r.IntN(slotSize)], int64(1-slot)*slotSize)
			default:
				n, err := nextToken(f, "k", dir)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if n <= granted {
					t.Fatalf("seed %d: token %d after %d", seed, n, granted)
				}
				granted = n
			}
		}
		f.Close()
	}
}

// A file of the old layout, a clock set back with the file intact, and
// the end of the counter. (From review.)
func TestCounterOldFileAndEdges(t *testing.T) {
	f, dir := counterFile(t)
	SetFloor(t, 0)
	// old file: 4 in slot 0, 3 in slot 1
	f.WriteAt(encodeSlot(4), 0)
	f.WriteAt(encodeSlot(3), slotSize)
	if n, _ := nextToken(f, "k", dir); n != 5 {
		t.Errorf("got %d", n)
	}
	if a, b, _ := Slots(f.Name()); a != 4 || b != 5 {
		t.Errorf("slots %d %d", a, b)
	}
	// clock back, intact file
	SetFloor(t, 1<<50)
	big, _ := nextToken(f, "k", dir)
	SetFloor(t, 7)
	if n, _ := nextToken(f, "k", dir); n != big+1 {
		t.Errorf("clock back: %d after %d", n, big)
	}
	// near max
	f.WriteAt(encodeSlot(math.MaxUint64-1), 0)
	f.WriteAt(encodeSlot(math.MaxUint64-2), slotSize)
	if n, err := nextToken(f, "k", dir); n != math.MaxUint64 || err != nil {
		t.Errorf("near max: %d %v", n, err)
	}
	if _, err := nextToken(f, "k", dir); err == nil {
		t.Errorf("no exhaustion error")
	}
	if a, b, _ := Slots(f.Name()); a != math.MaxUint64-1 || b != math.MaxUint64 {
		t.Errorf("slots after exhaustion %d %d", a, b)
	}
}

// The slots' checksum is CRC-32C as hash/crc32 computes it, so that lock
// files written by earlier versions (which used hash/crc32) stay valid.
func TestCRC32CMatchesHashCRC32(t *testing.T) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 64 {
		b := make([]byte, n%17)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := crc32c(b), crc32.Checksum(b, tab); got != want {
			t.Fatalf("crc32c(%x) = %08x, want %08x", b, got, want)
		}
	}
}

// crc32c equals hash/crc32's CRC-32C on every 8-byte slot, not only on
// samples: for inputs of one length both are affine over GF(2) (f(a^b) =
// f(a)^f(b)^f(0)), so agreeing on the zero slot and on each of the 64
// one-bit slots makes them agree on all 2^64. Slots written by earlier
// versions, which used hash/crc32, keep decoding, byte for byte.
func TestCRC32CEqualOnEverySlot(t *testing.T) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	var b [8]byte
	if got, want := crc32c(b[:]), crc32.Checksum(b[:], tab); got != want {
		t.Fatalf("crc32c(0) = %08x, want %08x", got, want)
	}
	for bit := range 64 {
		b = [8]byte{}
		b[bit/8] = 1 << (bit % 8)
		if got, want := crc32c(b[:]), crc32.Checksum(b[:], tab); got != want {
			t.Fatalf("crc32c(%x) = %08x, want %08x", b, got, want)
		}
	}
	if got := crc32c([]byte("123456789")); got != 0xe3069283 {
		t.Errorf("crc32c check value %08x, want e3069283", got)
	}
	// Slots as the earlier versions wrote them.
	for _, c := range []struct {
		n    uint64
		slot string
	}{
		{1, "00000000000000017e433189646c7431"},
		{2, "00000000000000026d13c27d646c7431"},
		{1764590000000000, "000644e2a01fcc00198af3a1646c7431"},
		{math.MaxUint64, "ffffffffffffffff48674bc7646c7431"},
	} {
		if got := hex.EncodeToString(encodeSlot(c.n)); got != c.slot {
			t.Errorf("encodeSlot(%d) = %s, want %s", c.n, got, c.slot)
		}
		raw, _ := hex.DecodeString(c.slot)
		if n, ok, _ := decodeSlot(raw); !ok || n != c.n {
			t.Errorf("decodeSlot(%s) = %d, %v, want %d", c.slot, n, ok, c.n)
		}
	}
}
