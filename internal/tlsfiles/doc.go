// Package tlsfiles builds client TLS configurations from the PEM files that
// backend URLs name (ca, cert, key), and tells TLS failures from network
// ones, so that the backends report a certificate problem as such.
package tlsfiles
