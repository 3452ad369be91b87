package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles names the PEM files of a client's TLS configuration, as every
// transport's URL spells them: tls_ca (the certificate authorities to
// trust instead of the system's), tls_cert and tls_key (a client
// certificate and its key, for brokers that authenticate clients by
// certificate). Transports build their tls.Config from it with
// [TLSFiles.Config], so the files are read and checked one way everywhere.
type TLSFiles struct {
	CA   string // tls_ca: PEM certificates to trust; empty: the system's roots
	Cert string // tls_cert: the client certificate (PEM); needs Key
	Key  string // tls_key: its private key (PEM); needs Cert
}

// The URL keys of TLS, the same on every transport.
const (
	KeyTLSCA       = "tls_ca"       // TLSFiles.CA
	KeyTLSCert     = "tls_cert"     // TLSFiles.Cert
	KeyTLSKey      = "tls_key"      // TLSFiles.Key
	KeyTLSInsecure = "tls_insecure" // skip the server's certificate check: for test brokers only
)

// Any reports whether f names a file.
func (f TLSFiles) Any() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// TLSFiles reads the tls_ca, tls_cert and tls_key keys. An empty value, or
// tls_cert without tls_key (or the reverse), is recorded as the query's
// error.
func (q *Query) TLSFiles() TLSFiles {
	var f TLSFiles
	for _, k := range []struct {
		key string
		to  *string
	}{{KeyTLSCA, &f.CA}, {KeyTLSCert, &f.Cert}, {KeyTLSKey, &f.Key}} {
		if v, ok := q.String(k.key); ok {
			if v == "" {
				q.Fail(k.key, "want a file path")
				continue
			}
			*k.to = v
		}
	}
	if (f.Cert == "") != (f.Key == "") {
		q.Fail(KeyTLSCert, "tls_cert and tls_key go together (a client certificate and its private key)")
	}
	return f
}

// Config reads the files and returns a TLS configuration with TLS 1.2 as
// the minimum version, the CA as its only roots when one is named, and the
// client certificate when one is named. The server name is left for the
// client library to take from the address it dials. An unreadable file,
// a CA file with no PEM certificate, or a certificate without its key (or
// the reverse) is an error wrapping [ErrInvalidOption] that names the key
// (tls_ca, tls_cert, tls_key) and the file, never its contents.
func (f TLSFiles) Config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: tls_ca: %w", ErrInvalidOption, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: tls_ca %s: no PEM certificate in the file", ErrInvalidOption, f.CA)
		}
		c.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%w: tls_cert and tls_key go together", ErrInvalidOption)
	}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: tls_cert and tls_key: %w", ErrInvalidOption, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
