package distlock

import "github.com/distlock/distlock/driver"

// MaxKeyLen is the longest key, in bytes, that every backend accepts.
const MaxKeyLen = driver.MaxKeyLen

// ValidateKey reports whether key can name a lock on every backend: it must
// be 1 to MaxKeyLen bytes of valid UTF-8 without control characters. Any
// other character, "/" and "." included, is allowed; backends escape what
// they cannot store so that two different keys never share a lock.
// The returned error matches ErrInvalidKey.
func ValidateKey(key string) error { return driver.ValidateKey(key) }
