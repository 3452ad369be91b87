package transport_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/internal/testcerts"
	"github.com/ferrymq/ferry/transport"
)

// TestTLSFiles: the shared reading of tls_ca, tls_cert and tls_key. A CA
// file gives the only roots and a pair the client certificate; a missing
// file, a file with no PEM certificate, and half a pair are errors that
// wrap ErrInvalidOption and name the key.
func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "ca")
	cert, key := ca.Server(t, dir, "client")
	c, err := transport.TLSFiles{CA: ca.File, Cert: cert, Key: key}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 || c.MinVersion == 0 {
		t.Fatalf("config %+v: want the CA's roots, one certificate, a minimum version", c)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]transport.TLSFiles{
		"tls_ca":       {CA: filepath.Join(dir, "missing.pem")},
		"no PEM":       {CA: junk},
		"go together":  {Cert: cert},
		"tls_cert and": {Cert: junk, Key: key},
	} {
		_, err := f.Config()
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: %v, want ErrInvalidOption naming %q", f, err, name)
		}
	}
	q := transport.ParseQuery("x", "tls_cert=/c.pem")
	if f := q.TLSFiles(); f.Cert != "/c.pem" || q.Err() == nil || !strings.Contains(q.Err().Error(), "tls_key") {
		t.Errorf("tls_cert alone: %+v, %v: want an error naming tls_key", f, q.Err())
	}
	q = transport.ParseQuery("x", "tls_ca=")
	if q.TLSFiles(); q.Err() == nil {
		t.Error("an empty tls_ca is accepted")
	}
}
