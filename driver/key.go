package driver

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, that every backend accepts.
const MaxKeyLen = 512

// MaxTTL is the longest lease a Client asks for; CheckTTL refuses longer ones.
const MaxTTL = 24 * time.Hour

// ValidateKey reports whether key can name a lock on every backend: it must
// be 1 to MaxKeyLen bytes of valid UTF-8 without control characters. Any
// other character, "/" and "." included, is allowed; backends escape what
// they cannot store so that two different keys never share a lock.
// The returned error matches ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	for i, r := range key {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrInvalidKey, r, i)
		}
	}
	return nil
}
