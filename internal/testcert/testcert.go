// Package testcert writes a throwaway CA and a server certificate for
// 127.0.0.1 and localhost, for tests that run NATS with TLS. Only the
// standard library: crypto/x509 and ECDSA P-256 keys.
// Being internal, it is orisun's machinery (test scaffolding): its API may
// change without notice.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files of one certificate set.
type Files struct {
	CA         string // the CA certificate (the clients' root)
	Cert, Key  string // the server's certificate (signed by the CA) and key
	ClientCert string // a client certificate signed by the CA
	ClientKey  string
	// PeerCert and PeerKey serve both ends of a connection between
	// servers (NATS routes): server and client authentication.
	PeerCert, PeerKey string
}

// Write creates a CA, a server certificate for 127.0.0.1/localhost and a
// client certificate in dir.
func Write(t testing.TB, dir string) Files {
	t.Helper()
	caKey := key(t)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "orisun test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		Cert:       filepath.Join(dir, "server.pem"),
		Key:        filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
		PeerCert:   filepath.Join(dir, "peer.pem"),
		PeerKey:    filepath.Join(dir, "peer-key.pem"),
	}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	leaf := func(serial int64, usage []x509.ExtKeyUsage, certPath, keyPath string) {
		k := key(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: "orisun test " + filepath.Base(certPath)},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		kDER, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyPath, "EC PRIVATE KEY", kDER)
	}
	leaf(2, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, f.Cert, f.Key)
	leaf(3, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, f.ClientCert, f.ClientKey)
	leaf(4, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, f.PeerCert, f.PeerKey)
	return f
}

func key(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
