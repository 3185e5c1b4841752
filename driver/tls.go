package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TLSConfig returns a client TLS configuration (TLS 1.2 or later) that
// verifies servers with the PEM CA bundle in ca (the system's roots if ca
// is empty) and presents the certificate and key in cert and key (none if
// both are empty; one without the other is an error). base, if not nil,
// is cloned and completed instead of a new configuration. Errors name the
// file and what is wrong with it.
func TLSConfig(base *tls.Config, ca, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
		if cfg.MinVersion < tls.VersionTLS12 {
			cfg.MinVersion = tls.VersionTLS12
		}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", ca)
		}
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != "" || key != "":
		return nil, errors.New("cert and key go together")
	}
	return cfg, nil
}

// IsTLSFailure reports whether err comes from TLS itself (a certificate the
// client could not verify, or an alert from the server such as a refused
// or missing client certificate) rather than from the network.
func IsTLSFailure(err error) bool {
	if err == nil {
		return false
	}
	var (
		alert   tls.AlertError
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		rec     tls.RecordHeaderError
	)
	// An alert received from the server has no exported type: it reads
	// "remote error: tls: ...".
	return errors.As(err, &alert) || errors.As(err, &verify) || errors.As(err, &unknown) ||
		errors.As(err, &host) || errors.As(err, &invalid) || errors.As(err, &rec) ||
		strings.Contains(err.Error(), "remote error: tls:")
}

// ExpectsTLS sends hello, the first words of the service's protocol, in
// plain text to each of addrs (host:port) at once; where a server closes
// the connection without a word, as a TLS server does, it offers it a TLS
// handshake, which verifies nothing and only tells a TLS server from one
// that is not. It returns the address of a server that speaks TLS when
// every server that could be reached within ctx does, and "" as soon as
// one answers in plain text (or says nothing within half a second), or
// when none can be reached: the client's requests report that. It returns
// once every probe has ended. nextProtos is offered through ALPN (nil for
// none).
func ExpectsTLS(ctx context.Context, addrs []string, hello string, nextProtos []string) string {
	ctx, cancel := context.WithCancel(ctx)
	type verdict struct {
		addr        string
		reached, ok bool // ok: it speaks TLS
	}
	results := make(chan verdict, len(addrs))
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Go(func() {
			reached, ok := probePlain(ctx, a, hello, nextProtos)
			results <- verdict{a, reached, ok}
		})
	}
	defer func() {
		cancel() // ends the probes still running
		wg.Wait()
	}()
	tlsAddr := ""
	for range addrs {
		v := <-results
		switch {
		case v.reached && !v.ok:
			return ""
		case v.ok && tlsAddr == "":
			tlsAddr = v.addr
		}
	}
	return tlsAddr
}

// plainAnswerWait is how long a probe waits for a server's first words
// in plain text: a TLS server hangs up at once, and one that says nothing
// is not taken for one. Tests lengthen it, so that a loaded machine cannot
// make a TLS server seem silent.
var plainAnswerWait = 500 * time.Millisecond

// probePlain sends hello to the server at addr and, if it closes the
// connection at once, offers it a TLS handshake. reached says the server
// could be reached, ok that it speaks TLS.
func probePlain(ctx context.Context, addr, hello string, nextProtos []string) (reached, ok bool) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, false
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	deadline := time.Now().Add(plainAnswerWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	_, err = io.WriteString(conn, hello)
	if err == nil {
		_, err = conn.Read(make([]byte, 1))
	}
	conn.Close()
	if !TLSClosedAtOnce(err) {
		return true, false // it answered in plain text, or said nothing in time
	}
	return true, speaksTLS(ctx, addr, nextProtos)
}

// speaksTLS reports whether the server at host (host:port) accepts a TLS
// handshake, or refuses it with a TLS alert.
func speaksTLS(ctx context.Context, host string, nextProtos []string) bool {
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: nextProtos}}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err == nil {
		conn.Close()
		return true
	}
	// A reply that is not a TLS record (say an HTTP 400) means the
	// opposite; IsTLSFailure counts it, as a TLS client's failure.
	var rec tls.RecordHeaderError
	return IsTLSFailure(err) && !errors.As(err, &rec)
}

// TLSRefusal dials each of addrs (host:port) with cfg, completes the
// handshake, and waits, without writing a byte, for what the server says
// first; it returns the first TLS alert a server sent (an error matching
// IsTLSFailure), or nil when every server kept quiet until ctx ended or
// hung up without one. A client whose first request met a reset or an EOF
// right after a TLS 1.3 handshake calls it: the server checks the client's
// certificate only after the client's handshake is done, and its alert
// (say "certificate required") is then lost if the client's request
// reaches the closed connection and is answered with a reset. A probe
// that writes nothing gets the alert whole. Call it with a short ctx: a
// server that accepted the connection says nothing until ctx ends.
func TLSRefusal(ctx context.Context, addrs []string, cfg *tls.Config) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(addrs))
	for _, a := range addrs {
		go func() { errs <- tlsRefusal(ctx, a, cfg) }()
	}
	var first error
	for range addrs {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel() // the other probes need not wait for ctx
		}
	}
	return first
}

func tlsRefusal(ctx context.Context, addr string, cfg *tls.Config) error {
	d := &tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if IsTLSFailure(err) {
			return err
		}
		return nil
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := conn.Read(make([]byte, 1)); IsTLSFailure(err) {
		return err
	}
	return nil
}

// TLSClosedAtOnce reports whether err means that the peer closed the
// connection without answering: what a TLS server does with plain text.
// A client that sees it can ask ExpectsTLS (or URL.ExpectsTLS) why.
func TLSClosedAtOnce(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// ExpectsTLS returns an error matching ErrInvalidOption, naming the URL's
// TLS scheme, when the servers at addrs, spoken to in plain text, expect
// TLS (see the function ExpectsTLS); nil otherwise, and for a URL of a
// TLS scheme.
func (u *URL) ExpectsTLS(ctx context.Context, addrs []string, hello string, nextProtos []string) error {
	if len(u.form.TLSSchemes) == 0 || slices.Contains(u.form.TLSSchemes, u.Scheme) {
		return nil
	}
	addr := ExpectsTLS(ctx, addrs, hello, nextProtos)
	if addr == "" {
		return nil
	}
	return u.Fail(ErrInvalidOption, fmt.Sprintf("the server at %s expects TLS: use %s (with ca, cert and key as it needs)", addr, u.tlsTwin()), nil)
}

// tlsTwin names the TLS scheme of the URL's: the one of its form's
// TLSSchemes that is its scheme with an "s" added (rediss+cluster for
// redis+cluster), or all of them.
func (u *URL) tlsTwin() string {
	for _, t := range u.form.TLSSchemes {
		for i := range len(t) {
			if t[i] == 's' && t[:i]+t[i+1:] == u.Scheme {
				return t + "://"
			}
		}
	}
	return orList(u.form.TLSSchemes, "://")
}
