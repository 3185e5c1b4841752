package driver_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// TLSRefusal gets the alert of a TLS 1.3 server that refuses a client
// without a certificate, which the server sends only after the client's
// handshake is done, and says nothing of a server that accepts the
// client.
func TestTLSRefusal(t *testing.T) {
	files := testserver.TestPKI(t)
	serverCert, err := tls.LoadX509KeyPair(files.ServerCertFile, files.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := files.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cas := clientTLS.RootCAs
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cas, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// Handshake, then wait for a request that never comes.
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Read(make([]byte, 1))
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	// A refusal comes as soon as the handshake is done: a long ctx costs
	// nothing then, and keeps a loaded machine from cutting the
	// handshake short. A server that accepts says nothing until ctx ends.
	probe := func(cfg *tls.Config, wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return driver.TLSRefusal(ctx, []string{addr, addr}, cfg)
	}
	noCert := &tls.Config{RootCAs: cas, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	if err := probe(noCert, 10*time.Second); err == nil || !driver.IsTLSFailure(err) {
		t.Fatalf("without a client certificate: %v, want the server's TLS alert", err)
	} else {
		t.Log(err)
	}
	withCert := clientTLS.Clone()
	withCert.ServerName = "127.0.0.1"
	if err := probe(withCert, 300*time.Millisecond); err != nil {
		t.Fatalf("with the client certificate: %v, want nothing", err)
	}
	// A server nobody listens at: nothing.
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := driver.TLSRefusal(ctx, []string{plain.Addr().String()}, noCert); err != nil {
		t.Fatalf("no server: %v", err)
	}
}
