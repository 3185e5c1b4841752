package testserver

import "testing"

// TestPKI writes a test certificate authority, a server certificate (for
// 127.0.0.1 and localhost) and a client certificate to a directory of the
// test's, for servers the tests run in-process or start themselves.
func TestPKI(t testing.TB) *TLSFiles {
	t.Helper()
	f, err := writeTestPKI(t.TempDir())
	if err != nil {
		t.Fatalf("test PKI: %v", err)
	}
	return f
}
