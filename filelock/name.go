//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxName is the longest escaped name used as is; longer ones are hashed.
// With the longest suffix (a reader's description while it is written,
// ".reader.", up to 20 digits and ".tmp") it stays under NAME_MAX (255).
const maxName = 200

// hashPrefix starts hashed names. Escaping never produces "~" (it is
// outside the bytes kept as they are), so a hashed name cannot equal an
// escaped one.
const hashPrefix = "~sha256-"

// File name suffixes. A key's name is never a prefix problem: every file of
// a key is its name plus exactly one of these, or of a semaphore's (see
// semaphore.go), or of a shared lock's (see shared.go), none of which
// ends another.
const (
	lockSuffix = ".lock"
	infoSuffix = ".info"
	tmpSuffix  = ".info.tmp"
)

// fileName maps a key to the base name of its files: one name per key and
// one key per name. Bytes other than [a-z0-9._-] are percent-encoded
// (upper case letters too, so that keys differing only in case stay apart
// on case-insensitive file systems), and so is a leading "." (no hidden
// files, no "." or ".."). A name longer than maxName is replaced by the
// SHA-256 of the key; the key itself is then kept inside the lock file.
func fileName(key string) string {
	var sb strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keep(c) && (i > 0 || c != '.') {
			sb.WriteByte(c)
			continue
		}
		const hexDigits = "0123456789ABCDEF"
		sb.WriteByte('%')
		sb.WriteByte(hexDigits[c>>4])
		sb.WriteByte(hexDigits[c&15])
	}
	if sb.Len() > maxName {
		sum := sha256.Sum256([]byte(key))
		return hashPrefix + hex.EncodeToString(sum[:])
	}
	return sb.String()
}

func keep(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// keyOfName reverses fileName for names that are not hashed. ok is false
// for hashed or malformed names.
func keyOfName(name string) (key string, ok bool) {
	if strings.HasPrefix(name, hashPrefix) {
		return "", false
	}
	var sb strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		hi, ok1 := unhex(name[i+1])
		lo, ok2 := unhex(name[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		sb.WriteByte(hi<<4 | lo)
		i += 2
	}
	return sb.String(), true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
