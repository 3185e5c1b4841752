package driver

// OtherSecret changes the letters and digits of s within their classes,
// keeping percent-escapes valid or invalid as they were, and an escaped
// NUL ("%00", which no password can hold, and parsers refuse) a NUL and
// any other escape not a NUL: the fuzz tests of every URL parser check that
// a URL with OtherSecret(password) in place of password gets the same
// outcome, so that no error depends on (and so shows) the password.
func OtherSecret(s string) string {
	b := []byte(s) // bytes, not runes: invalid UTF-8 stays as it is
	for i := 0; i < len(b); i++ {
		if b[i] == '%' && i+2 < len(b) && isHex(b[i+1]) && isHex(b[i+2]) {
			x, y := other(b[i+1]), other(b[i+2])
			if !(b[i+1] == '0' && b[i+2] == '0') && !(x == '0' && y == '0') {
				b[i+1], b[i+2] = x, y
			}
			i += 2
			continue
		}
		b[i] = other(b[i])
	}
	return string(b)
}

// other changes a letter or digit within its class (hexadecimal digits
// stay hexadecimal digits), and leaves other bytes.
func other(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return '0' + (c-'0'+5)%10
	case 'a' <= c && c <= 'f':
		return 'a' + (c-'a'+3)%6
	case 'A' <= c && c <= 'F':
		return 'A' + (c-'A'+3)%6
	case 'g' <= c && c <= 'z':
		return 'g' + (c-'g'+10)%20
	case 'G' <= c && c <= 'Z':
		return 'G' + (c-'G'+10)%20
	}
	return c
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
