package testcerts_test

import (
	"crypto/tls"
	"testing"

	"github.com/ferrymq/ferry/internal/testcerts"
)

// TestHandshake: a client trusting the CA completes a TLS handshake with
// a server using the certificate it issued, on 127.0.0.1; a client
// trusting another CA does not.
func TestHandshake(t *testing.T) {
	dir := t.TempDir()
	ca, other := testcerts.NewCA(t, dir, "ca"), testcerts.NewCA(t, dir, "other")
	certFile, keyFile := ca.Server(t, dir, "server")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	dial := func(cfg *tls.Config) error {
		c, err := tls.Dial("tcp", l.Addr().String(), cfg)
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	if err := dial(ca.ClientConfig()); err != nil {
		t.Errorf("the right CA: %v", err)
	}
	if err := dial(other.ClientConfig()); err == nil {
		t.Error("another CA: the handshake succeeded")
	}
}
