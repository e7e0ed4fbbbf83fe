package testenv

import (
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// NewHTTPProcess starts program bin with the arguments args returns for a
// free port on 127.0.0.1 (Prometheus, Alertmanager), waits until
// GET http://127.0.0.1:PORT+readyPath answers 200, and kills the process
// when the test ends. A port taken between FreePort and the bind is retried
// with another. It returns the base URL, http://127.0.0.1:PORT.
func NewHTTPProcess(t testing.TB, bin string, args func(port int) []string, readyPath string) string {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		var log bytes.Buffer
		cmd := exec.Command(bin, args(port)...)
		cmd.Stdout, cmd.Stderr = &log, &log
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			t.Fatalf("testenv: start %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		if waitHTTPReady(base+readyPath, exited, 60*time.Second) {
			t.Cleanup(stop)
			return base
		}
		stop()
		if !strings.Contains(log.String(), "address already in use") {
			t.Fatalf("testenv: %s did not become ready on %s:\n%s", bin, base, log.String())
		}
	}
	t.Fatalf("testenv: %s: no free port after 5 attempts", bin)
	return ""
}

// waitHTTPReady polls url until it answers 200, the process exits, or the
// deadline passes.
func waitHTTPReady(url string, exited <-chan struct{}, timeout time.Duration) bool {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select { // polling a readiness condition, with a deadline
		case <-exited:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}
