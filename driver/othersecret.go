package driver

// OtherSecret changes the letters and digits of s within their classes,
// keeping percent-escapes valid or invalid as they were: the fuzz tests of
// every URL parser check that a URL with OtherSecret(password) in place of
// password gets the same outcome, so that no error depends on (and so
// shows) the password.
func OtherSecret(s string) string {
	b := []byte(s) // bytes, not runes: invalid UTF-8 stays as it is
	for i, c := range b {
		switch {
		case '0' <= c && c <= '9':
			b[i] = '0' + (c-'0'+5)%10
		case 'a' <= c && c <= 'f':
			b[i] = 'a' + (c-'a'+3)%6
		case 'A' <= c && c <= 'F':
			b[i] = 'A' + (c-'A'+3)%6
		case 'g' <= c && c <= 'z':
			b[i] = 'g' + (c-'g'+10)%20
		case 'G' <= c && c <= 'Z':
			b[i] = 'G' + (c-'G'+10)%20
		}
	}
	return string(b)
}
