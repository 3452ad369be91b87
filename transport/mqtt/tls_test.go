package mqtt_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// TestTLS: over mqtts:// with tls_ca, tls_cert and tls_key, a private Mosquitto
// that requires client certificates accepts the Transport, and a message
// goes round; without the client certificate, or without TLS, the
// connection fails with ErrNotConnected. On both protocols.
func TestTLS(t *testing.T) {
	eachProtocol(t, testTLS)
}

func testTLS(t *testing.T, proto protocol) {
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	p := func(name string) string { return filepath.Join(dir, name) }
	b := startPrivateBroker(t, "cafile "+p("ca.pem"), "certfile "+p("server.pem"), "keyfile "+p("server.key"), "require_certificate true")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	url := "mqtts://" + b.addr() + "?tls_ca=" + p("ca.pem") + "&tls_cert=" + p("client.pem") + "&tls_key=" + p("client.key")
	tr, err := mqtt.New(ctx, url, proto.opt(), mqtt.RemoveSessionsOnClose())
	if err != nil {
		t.Fatalf("New over TLS: %v", err)
	}
	defer tr.Close(ctx)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: "tls", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "m1", Topic: "tls", Payload: []byte("secret reading")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil || d.Message().ID != "m1" {
		t.Fatalf("Receive = %v, %v", d, err)
	}
	_ = d.Ack(ctx)

	for name, u := range map[string]string{
		"no client certificate": "mqtts://" + b.addr() + "?tls_ca=" + p("ca.pem") + "&connect_timeout=2s",
		"plain TCP":             "mqtt://" + b.addr() + "?connect_timeout=2s",
	} {
		if _, err := mqtt.New(ctx, u, proto.opt()); !errors.Is(err, mqtt.ErrNotConnected) {
			t.Errorf("%s: New = %v; want ErrNotConnected", name, err)
		}
	}
}

// newCert writes name.pem and name.key in dir: a CA when parent is nil,
// else a certificate for 127.0.0.1 signed by parent.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "ferry-test-" + name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+".key", "EC PRIVATE KEY", kb)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
