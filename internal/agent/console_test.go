package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestConsole_ServesThePageItsAssetsAndTheRemediationFlag holds what the
// console's script relies on: / is the page, its script and stylesheet are
// served from /console/ (nothing from elsewhere), and /api/v1/findings says
// whether remediation is on, so the buttons show only then.
func TestConsole_ServesThePageItsAssetsAndTheRemediationFlag(t *testing.T) {
	r := testenv.NewRedis(t)
	for _, token := range []string{"", "s3cret"} {
		cfg := remediationConfig("console", r, token)
		a := start(t, cfg)
		code, page := get(t, a.URL())
		if code != 200 || !strings.Contains(page, `<script src="/console/app.js">`) || !strings.Contains(page, `href="/console/style.css"`) {
			t.Fatalf("GET / = %d %q: want the console page", code, page)
		}
		if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
			t.Errorf("the page loads something from elsewhere: %s", page)
		}
		for _, asset := range []string{"console/app.js", "console/style.css"} {
			if code, body := get(t, a.URL()+asset); code != 200 || body == "" {
				t.Errorf("GET /%s = %d, %d bytes", asset, code, len(body))
			}
		}
		_, body := get(t, a.URL()+"api/v1/findings")
		var doc struct{ Remediation *bool }
		if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Remediation == nil {
			t.Fatalf("findings %s: want a remediation field (%v)", body, err)
		}
		if *doc.Remediation != (token != "") {
			t.Errorf("remediation = %v with token %q", *doc.Remediation, token)
		}
	}
}

// e2eScript answers the console's dialogs (confirm, the token prompt),
// writes its alerts into the page, and clicks the first delete button
// under the selector once the console has rendered one, after writing the
// key its finding or row shows into the page (the next refresh may remove
// the lock), and after fetching the before-click path, when there is one
// (a test changes the store there, behind the page's back).
const e2eScript = `"use strict";
function e2eNote(cls, text) {
  var p = document.createElement("pre");
  p.className = cls;
  p.textContent = text;
  document.body.appendChild(p);
}
window.confirm = function () { return true; };
window.prompt = function () { return %q; };
window.alert = function (m) { e2eNote("e2e-alert", m); };
var e2eTimer = setInterval(function () {
  var b = document.querySelector(%q);
  if (!b) return;
  clearInterval(e2eTimer);
  var n = b;
  while (n && !n.querySelector("code")) n = n.parentNode;
  e2eNote("e2e-key", n ? n.querySelector("code").textContent : "");
  var before = %q;
  if (!before) { b.click(); return; }
  fetch(before, { method: "POST" }).then(function () { b.click(); });
}, 20);
`

// e2eNote returns the text of the page's <pre class="cls">, "" if none.
func e2eNote(dom, cls string) string {
	_, rest, ok := strings.Cut(dom, `<pre class="`+cls+`">`)
	text, _, _ := strings.Cut(rest, "</pre>")
	if !ok {
		return ""
	}
	return text
}

// TestConsole_TheDeleteButtonOfAKeyThatIsNotUTF8DeletesThatKey loads the
// console in headless Chromium, against the agent and a real Redis, and
// clicks "delete immortal lock" on an immortal lock whose key is not UTF-8,
// in the findings and in the live locks: that key is deleted, and the live
// lock on the key the lossy "key" field reads as ("lock:\uFFFD\uFFFD") is
// kept. The console shows the key with \xNN escapes. Before, the button
// sent the lossy key: 409 for the live lock, the immortal one kept.
func TestConsole_TheDeleteButtonOfAKeyThatIsNotUTF8DeletesThatKey(t *testing.T) {
	chromium := chromiumOrSkip(t)
	r := testenv.NewRedis(t)
	c := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	live := holdLiveLock(t, ctx, c, lossyKey)
	cfg := remediationConfig("console", r, "t0k")
	a := start(t, cfg)
	_, page := get(t, a.URL())

	for _, tc := range consoleDeleteButtons {
		t.Run(tc.name, func(t *testing.T) {
			showImmortalLock(t, ctx, a, c, rawKey, "another app's lock", "the immortal lock")
			dom := consoleDOM(t, ctx, chromium, a, page, fmt.Sprintf(e2eScript, cfg.RemediationToken, tc.button, ""), nil)
			if alert := e2eNote(dom, "e2e-alert"); !strings.HasPrefix(alert, "Deleted") {
				t.Errorf("the console's answer: %q, want Deleted", alert)
			}
			if n, _ := c.Exists(ctx, rawKey).Result(); n != 0 {
				t.Errorf("%q is still there", rawKey)
			}
			if err := live.Refresh(ctx); err != nil {
				t.Fatalf("the live lock on %q: %v", lossyKey, err)
			}
			if shown := e2eNote(dom, "e2e-key"); shown != `lock:\xff\xfe` {
				t.Errorf(`the console showed the key as %q, want lock:\xff\xfe`, shown)
			}
			if t.Failed() {
				t.Logf("DOM:\n%s", dom)
			}
		})
	}
}

// chromiumOrSkip returns the path of chromium, skipping the test (a
// browser check of the console) when it is not installed.
func chromiumOrSkip(t *testing.T) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; scripts/test installs it): the console's browser check is skipped")
	}
	return chromium
}

// consoleDeleteButtons are the console's "delete immortal lock" buttons: a
// finding's and a live lock's.
var consoleDeleteButtons = []struct{ name, button string }{
	{"finding", "#findings button.remediate"},
	{"live lock", "#locks button.remediate"},
}

// showImmortalLock deletes key, waits for a record listing no immortal
// lock, then sets key to value with no TTL (another application's lock) and
// waits for the findings and the locks to list an immortal lock (what
// names the lock, in the wait's message). The page must see the lock: a
// record without it, then one with it, is a scan that read it, and so is
// every later one.
func showImmortalLock(t *testing.T, ctx context.Context, a *Agent, c *redis.Client, key, value, what string) {
	t.Helper()
	listed := func() (finding, lock bool) {
		_, fs := get(t, a.URL()+"api/v1/findings")
		_, ls := get(t, a.URL()+"api/v1/locks")
		return strings.Contains(fs, `"kind":"immortal"`), strings.Contains(ls, `"immortal":true`)
	}
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no immortal lock listed", func() bool { f, l := listed(); return !f && !l })
	if err := c.Set(ctx, key, value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, what+" in the findings and the locks", func() bool { f, l := listed(); return f && l })
}

// consoleDOM loads the console as the agent a serves it (page is its /) in
// headless Chromium, on a page that also loads script first (same origin:
// the page's CSP holds), and returns the DOM once the virtual time budget
// is spent. Requests go to the agent through a proxy, except the routes
// extra adds (given the proxy, to pass requests on).
func consoleDOM(t *testing.T, ctx context.Context, chromium string, a *Agent, page, script string, extra func(mux *http.ServeMux, agent http.Handler)) string {
	t.Helper()
	target, err := url.Parse(a.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	proxy.Transport = tr
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		fmt.Fprint(w, strings.Replace(page, `<script src="/console/app.js">`, `<script src="/e2e.js"></script><script src="/console/app.js">`, 1))
	})
	mux.HandleFunc("GET /e2e.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, script)
	})
	if extra != nil {
		extra(mux, proxy)
	}
	mux.Handle("/", proxy)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	profile := t.TempDir()
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
	defer ccancel()
	cmd := exec.CommandContext(cctx, chromium, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--disable-dev-shm-usage", "--user-data-dir="+profile, "--virtual-time-budget=5000", "--dump-dom", srv.URL+"/")
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stderr syncBuf
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return string(out)
}

// TestConsole_TheDeleteButtonSendsTheVersionShown_ALockReplacedMeanwhileIsKept
// loads the console in headless Chromium against the agent and a real
// Redis; once it shows an immortal lock, another application replaces that
// lock with another immortal one, and then the operator clicks "delete
// immortal lock", in the findings and in the live locks. The console sends
// the version of what it showed as If-Match: the agent answers 412, the
// console says the lock changed, and the new lock is kept. Before, the
// console sent no version and the new lock was deleted.
func TestConsole_TheDeleteButtonSendsTheVersionShown_ALockReplacedMeanwhileIsKept(t *testing.T) {
	chromium := chromiumOrSkip(t)
	const key, oldValue, newValue = "lock:order:9", "another app's lock", "another app's new lock"
	r := testenv.NewRedis(t)
	c := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := remediationConfig("console", r, "t0k")
	a := start(t, cfg)
	_, page := get(t, a.URL())

	for _, tc := range consoleDeleteButtons {
		t.Run(tc.name, func(t *testing.T) {
			showImmortalLock(t, ctx, a, c, key, oldValue, "the old lock")
			var ifMatch atomic.Pointer[string]
			dom := consoleDOM(t, ctx, chromium, a, page, fmt.Sprintf(e2eScript, cfg.RemediationToken, tc.button, "/e2e/replace"),
				func(mux *http.ServeMux, agent http.Handler) {
					mux.HandleFunc("POST /e2e/replace", func(w http.ResponseWriter, r *http.Request) {
						if err := c.Set(r.Context(), key, newValue, 0).Err(); err != nil {
							t.Error(err)
						}
						w.WriteHeader(http.StatusNoContent)
					})
					mux.HandleFunc("DELETE /api/v1/locks", func(w http.ResponseWriter, r *http.Request) {
						v := r.Header.Get("If-Match")
						ifMatch.Store(&v)
						agent.ServeHTTP(w, r)
					})
				})
			sent := ""
			if p := ifMatch.Load(); p != nil {
				sent = *p
			}
			if v, _ := c.Get(ctx, key).Result(); v != newValue {
				t.Errorf("the lock that replaced the one shown is gone (value %q); the console sent If-Match %q", v, sent)
			}
			if want := quoted(sha1hex(oldValue)); sent != want {
				t.Errorf("the console sent If-Match %q, want %q (the version it showed)", sent, want)
			}
			if alert := e2eNote(dom, "e2e-alert"); !strings.Contains(alert, "changed since") {
				t.Errorf("the console's answer: %q, want that the lock changed since it was shown", alert)
			}
			if t.Failed() {
				t.Logf("DOM:\n%s", dom)
			}
		})
	}
}
