package testenv

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdOption configures StartEtcd and NewEtcd.
type EtcdOption interface {
	apply(*etcdConfig)
}

type etcdConfig struct {
	clientCertTLS bool
}

type etcdOptionFunc func(*etcdConfig)

func (f etcdOptionFunc) apply(c *etcdConfig) { f(c) }

// WithEtcdClientCertTLS serves the client URL over TLS (https://) with
// certificates testenv generates (Etcd.Certs) and requires a client
// certificate signed by the test CA (ClientCertAuth).
func WithEtcdClientCertTLS() EtcdOption {
	return etcdOptionFunc(func(c *etcdConfig) { c.clientCertTLS = true })
}

func (e *Etcd) secure(cfg etcdConfig) error {
	if !cfg.clientCertTLS {
		return nil
	}
	dir := filepath.Join(e.dir, "tls") // beside etcd's member/, not in it
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("testenv: etcd tls dir: %w", err)
	}
	c, err := GenerateCerts(dir)
	if err != nil {
		return err
	}
	e.certs = c
	e.clientURL.Scheme = "https"
	return nil
}

// Certs returns the certificates of a member started
// WithEtcdClientCertTLS, nil otherwise.
func (e *Etcd) Certs() *Certs { return e.certs }

// ClientConfig returns a client configuration for this member with tlsCfg
// (nil: plain), a 2-second dial timeout and no logging.
func (e *Etcd) ClientConfig(tlsCfg *tls.Config) clientv3.Config {
	return clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		TLS:         tlsCfg,
	}
}
