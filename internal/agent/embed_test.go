package agent

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/testenv"
)

func TestStart_NoStore_StartsEmbeddedEtcdAndSaysHowToUseIt(t *testing.T) {
	cport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	pport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	var stdout syncBuf
	cfg := testConfig("agent")
	cfg.DataDir = t.TempDir()
	cfg.EmbedClientURL = "http://127.0.0.1:" + strconv.Itoa(cport)
	cfg.EmbedPeerURL = "http://127.0.0.1:" + strconv.Itoa(pport)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Stdout = &stdout
	a := start(t, cfg)
	if !strings.Contains(logs.String(), "embedded single-node etcd") || !strings.Contains(logs.String(), "--etcd "+cfg.EmbedClientURL) {
		t.Errorf("log does not say how to point processes at the embedded etcd:\n%s", logs.String())
	}
	if got := stdout.String(); got != a.URL()+"\n" || !strings.HasPrefix(got, "http://127.0.0.1:") {
		t.Errorf("stdout %q, want the console URL on a line of its own", got)
	}
	waitFor(t, "the agent to lead on the embedded etcd", a.Leader)
	waitReady(t, a, "on the embedded etcd")
	if code, body := get(t, a.URL()); code != 200 || !strings.Contains(body, "<title>lockgov console</title>") {
		t.Errorf("/: %d %s", code, body)
	}
}
