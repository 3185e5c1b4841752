package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
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

// SpeaksTLS reports whether the server at host (host:port) accepts a TLS
// handshake, or refuses it with a TLS alert. It verifies nothing and sends
// no data: it only tells a TLS server from one that is not, for a clearer
// message when a client spoke plain text to it. nextProtos is offered
// through ALPN (nil for none).
func SpeaksTLS(ctx context.Context, host string, nextProtos []string) bool {
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: nextProtos}}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err == nil {
		conn.Close()
		return true
	}
	// A reply that is not a TLS record (say an HTTP 400) means the
	// opposite; IsFailure counts it, as a TLS client's failure.
	var rec tls.RecordHeaderError
	return IsTLSFailure(err) && !errors.As(err, &rec)
}

// TLSClosedAtOnce reports whether err means that the peer closed the
// connection without answering: what a TLS server does with plain text.
func TLSClosedAtOnce(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}
