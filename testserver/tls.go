package testserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a test certificate authority made for one
// server: its CA certificate, the server's certificate and key (for
// 127.0.0.1 and localhost), and a client certificate and key signed by the
// same CA.
type TLSFiles struct {
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string
}

// writeTestPKI creates a CA, a server and a client certificate (ECDSA
// P-256, valid for a day) and writes them to dir.
func writeTestPKI(dir string) (*TLSFiles, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "distlock test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	f := &TLSFiles{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	if err := writePEM(f.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, name string, usage []x509.ExtKeyUsage, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		return errors.Join(writePEM(certFile, "CERTIFICATE", der), writePEM(keyFile, "EC PRIVATE KEY", keyDER))
	}
	// etcd presents its server certificate to peers and uses it as a
	// client of its own gateway, so it serves both purposes.
	if err := leaf(2, "127.0.0.1", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, f.ServerCertFile, f.ServerKeyFile); err != nil {
		return nil, err
	}
	if err := leaf(3, "distlock test client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, f.ClientCertFile, f.ClientKeyFile); err != nil {
		return nil, err
	}
	return f, nil
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// ClientTLS returns a TLS configuration that trusts the CA and presents the
// client certificate.
func (f *TLSFiles) ClientTLS() (*tls.Config, error) {
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in " + f.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// httpClient is etcdHTTP with the client TLS configuration.
func (f *TLSFiles) httpClient() (*http.Client, error) {
	cfg, err := f.ClientTLS()
	if err != nil {
		return nil, err
	}
	tr := etcdHTTP.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Timeout: etcdHTTP.Timeout, Transport: tr}, nil
}

// Query returns URL query parameters naming the CA and the client
// certificate and key: "ca=...&cert=...&key=...".
func (f *TLSFiles) Query() string {
	return "ca=" + url.QueryEscape(f.CAFile) + "&" + f.clientQuery()
}

func (f *TLSFiles) clientQuery() string {
	return "cert=" + url.QueryEscape(f.ClientCertFile) + "&key=" + url.QueryEscape(f.ClientKeyFile)
}

// CheckTLSRefused runs, as subtests, the two ways a TLS client can be
// refused by a server started with these files: without a client
// certificate, and without trusting the server's CA. open is given the URL
// query of each case; it must fail, with an error that says "TLS" and does
// not match isUnavailable (a certificate problem is not worth retrying).
func (f *TLSFiles) CheckTLSRefused(t *testing.T, open func(query string) (io.Closer, error), isUnavailable func(error) bool) {
	t.Helper()
	for name, query := range map[string]string{
		"no client certificate": "ca=" + url.QueryEscape(f.CAFile),
		"not trusting the CA":   f.clientQuery(),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := open(query)
			if err == nil {
				c.Close()
				t.Fatal("opened a connection that the server should refuse")
			}
			if !strings.Contains(err.Error(), "TLS") || isUnavailable(err) {
				t.Errorf("error %q: want a TLS error that does not ask for a retry", err)
			}
			t.Logf("%v", err)
		})
	}
}
