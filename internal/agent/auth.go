package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// StoreAuth is how the agent authenticates to one kind of store (Config's
// RedisAuth, EtcdAuth): a user and password, and TLS files. A user or
// password written in a store URL wins over these.
//
// The password is never read from the config file: give PasswordFile (a
// file holding only the password; a trailing newline is dropped), or set
// Password from the environment (`lockgov agent` reads
// LOCKGOV_REDIS_PASSWORD and LOCKGOV_ETCD_PASSWORD). Neither is logged,
// nor repeated in an error.
type StoreAuth struct {
	Username     string
	PasswordFile string
	Password     string `yaml:"-"`
	// CAFile verifies the server's certificate (default: the system
	// roots); CertFile and KeyFile are a client certificate (both or
	// neither). ServerName overrides the name checked in the server's
	// certificate (default: the URL's host). Setting any of them needs a
	// TLS URL (rediss://, rediss-sentinel://, https://).
	CAFile, CertFile, KeyFile string
	ServerName                string
}

var authFields = []string{"username", "password_file", "tls_ca", "tls_cert", "tls_key", "tls_server_name"}

// hasTLS reports whether a TLS file or server name is set.
func (a StoreAuth) hasTLS() bool {
	return a.CAFile != "" || a.CertFile != "" || a.KeyFile != "" || a.ServerName != ""
}

// password returns Password, or the content of PasswordFile.
func (a StoreAuth) password(field string) (string, error) {
	if a.Password != "" || a.PasswordFile == "" {
		return a.Password, nil
	}
	b, err := os.ReadFile(a.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("%s.password_file: %w", field, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("%s.password_file %s: empty", field, a.PasswordFile)
	}
	return pw, nil
}

// applyTLS adds the CA, the client certificate and the server name to c,
// the TLS configuration a TLS URL gave.
func (a StoreAuth) applyTLS(field string, c *tls.Config) error {
	if a.CAFile != "" {
		pem, err := os.ReadFile(a.CAFile)
		if err != nil {
			return fmt.Errorf("%s.tls_ca: %w", field, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s.tls_ca %s: no PEM certificate in it", field, a.CAFile)
		}
		c.RootCAs = pool
	}
	switch {
	case a.CertFile != "" && a.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile)
		if err != nil {
			return fmt.Errorf("%s.tls_cert/tls_key %s, %s: %w", field, a.CertFile, a.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	case a.CertFile != "" || a.KeyFile != "":
		return fmt.Errorf("%s: tls_cert and tls_key go together (one is empty)", field)
	}
	if a.ServerName != "" {
		c.ServerName = a.ServerName
	}
	return nil
}

// probeTLS dials one store address over TLS and reports a failed
// handshake naming its cause (unknown authority, certificate required,
// name mismatch). A store that is down is not an error here: the agent
// starts and reports it on /readyz. The etcd client only ever says
// "context deadline exceeded" about a handshake it cannot complete, so
// the agent checks itself at start.
func probeTLS(field, addr string, c *tls.Config) error {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: c.Clone()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		tc := conn.(*tls.Conn)
		// TLS 1.3 reports a refused client certificate on the first read.
		_ = tc.SetReadDeadline(time.Now().Add(time.Second))
		_, err = tc.Read(make([]byte, 1))
		conn.Close()
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return nil // down or unreachable: /readyz says so
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return fmt.Errorf("%s: TLS to %s: %w", field, addr, err)
}

// hostPort returns the host:port of a URL, for probeTLS.
func hostPort(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return raw
}
