package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs is a private PKI for one test: a CA, a server certificate for
// 127.0.0.1 and localhost, and a client certificate, all signed by the CA
// and written as PEM files into Dir. Nothing is read from or written to the
// system's trust store.
type Certs struct {
	Dir string
	// CAFile is the CA certificate; ServerCert/KeyFile the server's pair;
	// ClientCert/KeyFile the client's (CN "lockgov-test-client").
	CAFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile string

	pool   *x509.CertPool
	client tls.Certificate
}

// NewCerts generates a PKI in a temporary directory removed when the test
// ends. Two calls give two unrelated CAs (a client trusting one refuses a
// server of the other).
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir, err := os.MkdirTemp("", "testenv-tls-")
	if err != nil {
		t.Fatalf("testenv: tls dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c, err := GenerateCerts(dir)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return c
}

// GenerateCerts writes a new CA, server and client certificate into dir.
// Keys are ECDSA P-256; certificates are valid from an hour ago for a day.
func GenerateCerts(dir string) (*Certs, error) {
	c := &Certs{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tls: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lockgov-test-ca " + filepath.Base(dir)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("tls: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("tls: CA certificate: %w", err)
	}
	if err := writePEM(c.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certFile, keyFile string) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("tls: %s key: %w", cn, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("tls: %s certificate: %w", cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("tls: %s key: %w", cn, err)
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
			return tls.Certificate{}, err
		}
		return tls.LoadX509KeyPair(certFile, keyFile)
	}
	if _, err := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, c.ServerCertFile, c.ServerKeyFile); err != nil {
		return nil, err
	}
	if c.client, err = leaf(3, "lockgov-test-client", x509.ExtKeyUsageClientAuth, c.ClientCertFile, c.ClientKeyFile); err != nil {
		return nil, err
	}
	c.pool = x509.NewCertPool()
	c.pool.AddCert(ca)
	return c, nil
}

func writePEM(path, typ string, der []byte) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("tls: write %s: %w", path, err)
	}
	return nil
}

// ClientTLS returns a client configuration that trusts only this CA and
// presents the client certificate. Each call returns a new value.
func (c *Certs) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      c.pool,
		Certificates: []tls.Certificate{c.client},
		ServerName:   "127.0.0.1",
	}
}

// ServerTLS returns a server configuration with the server certificate
// that requires and verifies a client certificate signed by this CA.
func (c *Certs) ServerTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.ServerCertFile, c.ServerKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: server pair: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    c.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}
