package testenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
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
	users         []etcdUser
}

type etcdUser struct {
	name, password string
	prefixes       []string
}

type etcdOptionFunc func(*etcdConfig)

func (f etcdOptionFunc) apply(c *etcdConfig) { f(c) }

// WithEtcdClientCertTLS serves the client URL over TLS (https://) with
// certificates testenv generates (Etcd.Certs) and requires a client
// certificate signed by the test CA (ClientCertAuth).
func WithEtcdClientCertTLS() EtcdOption {
	return etcdOptionFunc(func(c *etcdConfig) { c.clientCertTLS = true })
}

// WithEtcdUser adds an etcd user (RBAC) with read-write access to the keys
// under each prefix, and turns authentication on: every client must log in.
// testenv connects as root (Etcd.Client). Repeat for several users.
func WithEtcdUser(name, password string, prefixes ...string) EtcdOption {
	return etcdOptionFunc(func(c *etcdConfig) {
		c.users = append(c.users, etcdUser{name: name, password: password, prefixes: prefixes})
	})
}

// enableAuth creates the users of cfg, their roles and root, and turns
// authentication on. It runs once, on a new member.
func (e *Etcd) enableAuth(cfg etcdConfig) error {
	if len(cfg.users) == 0 {
		return nil
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	rootPassword := hex.EncodeToString(b)
	var tlsCfg *tls.Config
	if e.certs != nil {
		tlsCfg = e.certs.ClientTLS()
	}
	c, err := clientv3.New(e.ClientConfig(tlsCfg))
	if err != nil {
		return fmt.Errorf("testenv: etcd auth setup: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
	}
	for _, u := range cfg.users {
		role := u.name + "-role"
		steps = append(steps,
			func() error { _, err := c.RoleAdd(ctx, role); return err },
			func() error { _, err := c.UserAdd(ctx, u.name, u.password); return err },
			func() error { _, err := c.UserGrantRole(ctx, u.name, role); return err })
		for _, p := range u.prefixes {
			steps = append(steps, func() error {
				_, err := c.RoleGrantPermission(ctx, role, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			})
		}
	}
	steps = append(steps, func() error { _, err := c.AuthEnable(ctx); return err })
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("testenv: etcd auth setup: %w", err)
		}
	}
	e.rootPassword = rootPassword
	return nil
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

// RootPassword is the password of root under WithEtcdUser, "" otherwise.
func (e *Etcd) RootPassword() string { return e.rootPassword }

// ClientConfig returns a client configuration for this member with tlsCfg
// (nil: plain), a 5-second dial timeout (it includes the login) and no logging; set Username and
// Password on it for a member started WithEtcdUser.
func (e *Etcd) ClientConfig(tlsCfg *tls.Config) clientv3.Config {
	return clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		TLS:         tlsCfg,
	}
}
