package agent

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Default listen URLs of the embedded etcd.
const (
	DefaultEmbedClientURL = "http://127.0.0.1:2379"
	DefaultEmbedPeerURL   = "http://127.0.0.1:2380"
)

const embedReadyTimeout = 60 * time.Second

// embeddedEtcd is the embedded etcd with the level of its log, which Close
// raises: a closing etcd logs its listeners' "server closed" errors, which
// are not errors of a shutdown the agent asked for.
type embeddedEtcd struct {
	*embed.Etcd
	level zap.AtomicLevel
}

// Close stops the etcd without logging its expected shutdown errors.
func (e *embeddedEtcd) Close() {
	e.level.SetLevel(zapcore.FatalLevel)
	e.Etcd.Close()
}

// startEmbedded starts a single-node etcd with its data under dir (default
// os.UserCacheDir()/lockgov/etcd), for an agent given no store.
func startEmbedded(dir, clientURL, peerURL string) (*embeddedEtcd, error) {
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("embedded etcd: no data directory (set data_dir): %w", err)
		}
		dir = filepath.Join(cache, "lockgov", "etcd")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	if clientURL == "" {
		clientURL = DefaultEmbedClientURL
	}
	if peerURL == "" {
		peerURL = DefaultEmbedPeerURL
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client URL: %w", err)
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: peer URL: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "lockgov-agent"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	level := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stderr), level)))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd (data in %s): %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &embeddedEtcd{Etcd: e, level: level}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(embedReadyTimeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd (data in %s) not ready within %v", dir, embedReadyTimeout)
	}
}
