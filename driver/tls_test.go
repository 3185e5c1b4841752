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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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

// ExpectsTLS names a server that hangs up on plain text and speaks TLS,
// when no other server answers in plain text; an unreachable server does
// not count, and a silent one is not taken for a TLS one.
func TestExpectsTLS(t *testing.T) {
	// A silent server is told apart by ctx's deadline below, not by this
	// wait, which then only bounds a TLS server's hanging up.
	defer func(d time.Duration) { plainAnswerWait = d }(plainAnswerWait)
	plainAnswerWait = time.Hour
	ctx := context.Background()
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	tlsAddr := tlsSrv.Listener.Addr().String()
	plain := serve(t, func(c net.Conn) {
		c.Read(make([]byte, 64))
		io.WriteString(c, "+PONG\r\n")
	})
	silent := serve(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()
	for _, tc := range []struct {
		addrs []string
		want  string
	}{
		{[]string{tlsAddr}, tlsAddr},
		{[]string{closed, tlsAddr}, tlsAddr},
		{[]string{plain}, ""},
		{[]string{tlsAddr, plain}, ""},
		{[]string{closed}, ""},
		{[]string{silent}, ""},
		{[]string{silent, tlsAddr}, ""},
	} {
		ctx := ctx
		if slices.Contains(tc.addrs, silent) {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
		}
		if got := ExpectsTLS(ctx, tc.addrs, "PING\r\n", nil); got != tc.want {
			t.Errorf("ExpectsTLS(%v) = %q, want %q", tc.addrs, got, tc.want)
		}
	}
	// The URL's error names its scheme's TLS twin.
	u, err := ParseURL("redis+cluster://"+tlsAddr, URLForm{Pkg: "xlock", Schemes: []string{"redis+cluster", "rediss+cluster"}, TLSSchemes: []string{"rediss+cluster"}})
	if err != nil {
		t.Fatal(err)
	}
	err = u.ExpectsTLS(ctx, []string{tlsAddr}, "PING\r\n", nil)
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "the server at "+tlsAddr+" expects TLS: use rediss+cluster://") {
		t.Errorf("URL.ExpectsTLS: %v", err)
	}
	if !TLSClosedAtOnce(fmt.Errorf("read: %w", io.EOF)) || TLSClosedAtOnce(errors.New("timeout")) {
		t.Error("TLSClosedAtOnce")
	}
}

// serve runs handle on every connection to a new listener until the test
// ends, and returns its address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return l.Addr().String()
}

func TestSpeaksTLS(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	if !speaksTLS(ctx, srv.Listener.Addr().String(), nil) {
		t.Error("a TLS server is not recognised")
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	if speaksTLS(ctx, plain.Listener.Addr().String(), nil) {
		t.Error("a plain HTTP server is taken for a TLS one")
	}
}
