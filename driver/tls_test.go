package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestConfigBadFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][3]string{
		"missing CA":       {filepath.Join(dir, "nope.pem"), "", ""},
		"CA not PEM":       {notPEM, "", ""},
		"cert without key": {"", notPEM, ""},
		"key without cert": {"", "", notPEM},
		"bad pair":         {"", notPEM, notPEM},
	} {
		if _, err := TLSConfig(nil, args[0], args[1], args[2]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	cfg, err := TLSConfig(&tls.Config{ServerName: "h", MinVersion: tls.VersionTLS10}, "", "", "")
	if err != nil || cfg.ServerName != "h" || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLSConfig(base) = %+v, %v; want the base's server name and TLS 1.2 at least", cfg, err)
	}
}

func TestIsFailure(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{&net.OpError{Op: "dial", Err: errors.New("i/o timeout")}, false},
		{fmt.Errorf("wrapped: %w", x509.UnknownAuthorityError{}), true},
		{&tls.CertificateVerificationError{Err: errors.New("x")}, true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, true},
	} {
		if got := IsTLSFailure(c.err); got != c.want {
			t.Errorf("IsTLSFailure(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestSpeaksTLS(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	if !SpeaksTLS(ctx, srv.Listener.Addr().String(), nil) {
		t.Error("a TLS server is not recognised")
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	if SpeaksTLS(ctx, plain.Listener.Addr().String(), nil) {
		t.Error("a plain HTTP server is taken for a TLS one")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if SpeaksTLS(ctx, addr, nil) {
		t.Error("a closed port is taken for a TLS server")
	}
	if !TLSClosedAtOnce(fmt.Errorf("read: %w", io.EOF)) || TLSClosedAtOnce(errors.New("timeout")) {
		t.Error("ClosedAtOnce")
	}
}
