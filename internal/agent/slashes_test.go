package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

// rawRequest sends method and target exactly as given (no client cleans
// or re-encodes the path) to the agent and returns its answer, body read.
func rawRequest(t *testing.T, a *Agent, method, target string, header ...string) (*http.Response, string) {
	t.Helper()
	addr := agentAddr(a)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A bound, not a timing assertion: nothing here should hang.
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, addr)
	for _, h := range header {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, target, err)
	}
	return resp, string(b)
}

func agentAddr(a *Agent) string {
	return strings.TrimSuffix(strings.TrimPrefix(a.URL(), "http://"), "/")
}

// answer is what a request's response says apart from its body and the
// headers that change from one request to the next.
func answer(resp *http.Response) string {
	return fmt.Sprintf("%d Location=%q Allow=%q Content-Type=%q", resp.StatusCode,
		resp.Header.Get("Location"), resp.Header.Get("Allow"), resp.Header.Get("Content-Type"))
}

// TestHTTP_ARunOfLeadingSlashesAnswersAsOneSlash: "//X" and "///X" get the
// answer "/X" gets, whatever X is: the API with its query, the console page
// and its assets, /metrics, HEAD, OPTIONS (405 with its Allow), and the
// paths ServeMux redirects (dot segments, /console), whose Location keeps
// the query.
func TestHTTP_ARunOfLeadingSlashesAnswersAsOneSlash(t *testing.T) {
	r := testenv.NewRedis(t)
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr()}
	cfg.RemediationToken = "tok"
	a := start(t, cfg)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/api/v1/findings?x=y", "200"},
		{"GET", "/", "200"},
		{"GET", "/metrics", "200"},
		{"GET", "/healthz", "200"},
		{"GET", "/console/", "200"},
		{"HEAD", "/api/v1/locks", "200"},
		{"OPTIONS", "/api/v1/findings", "405"},
		{"POST", "/api/v1/locks", "405"},
		{"GET", "/console", "307"},
		{"GET", "/./api/v1/findings?x=y", "307"},
		{"GET", "/api/../api/v1/findings?x=y", "307"},
		{"GET", "/api/v1/nosuch", "404"},
	} {
		one, _ := rawRequest(t, a, tc.method, tc.path)
		if got := answer(one); !strings.HasPrefix(got, tc.want+" ") {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.path, got, tc.want)
		}
		for _, run := range []string{"/", "//"} {
			p := run + tc.path
			resp, _ := rawRequest(t, a, tc.method, p)
			if got, want := answer(resp), answer(one); got != want {
				t.Errorf("%s %s: %s, want what %s gets: %s", tc.method, p, got, tc.path, want)
			}
		}
	}
}

// TestHTTP_AnEncodedSlashIsNotCollapsed: %2F is a byte of a path segment,
// not a separator. "/%2Fapi/v1/findings" names a segment "/api", not the
// API, and "//%2Fapi/v1/findings" is that path with one slash too many:
// neither reaches the API, as before leading slashes were collapsed. A
// proxy in front of the agent that guards /api/v1/locks sees no
// /api/v1/locks in "/%2Fapi/v1/locks": the agent must not see one either.
func TestHTTP_AnEncodedSlashIsNotCollapsed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const value = "tok-immortal 7 {\"service\":\"billing\",\"pid\":1}"
	r, c := redisWithImmortalLock(t, ctx, "lock:order:9", value)
	a := start(t, remediationConfig("agent", r, "tok"))
	for _, p := range []string{"/%2Fapi/v1/findings", "//%2Fapi/v1/findings", "/%2F%2Fapi/v1/findings", "/%2f/api/v1/findings"} {
		if resp, body := rawRequest(t, a, "GET", p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s %.60q, want 404: an encoded slash is not a separator", p, answer(resp), body)
		}
	}
	for _, p := range []string{"/%2Fapi/v1/locks?key=lock:order:9", "//%2Fapi/v1/locks?key=lock:order:9"} {
		if resp, body := rawRequest(t, a, "DELETE", p, "Authorization: Bearer tok"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("DELETE %s: %s %.80q, want 404", p, answer(resp), body)
		}
	}
	if n, err := c.Exists(ctx, "lock:order:9").Result(); err != nil || n != 1 {
		t.Fatalf("lock:order:9 after DELETEs of other paths: exists %d, %v", n, err)
	}
}

// TestHTTP_NoPathRedirectsOffHost: a path that reads as a network-path
// reference ("//evil.example/...") or turns into one once cleaned gets no
// Location that leaves the agent: every Location, resolved against the
// request's URL as a browser does, names the agent's own host.
func TestHTTP_NoPathRedirectsOffHost(t *testing.T) {
	// A store of the test's own: with none the agent starts its embedded
	// etcd on the fixed 127.0.0.1:2379/2380 in the user's cache directory,
	// another process's ports and data.
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + testenv.NewRedis(t).Addr()}
	a := start(t, cfg)
	host := agentAddr(a)
	for _, p := range []string{
		"//evil.example/", "//evil.example", "///evil.example/x/..", "//evil.example/%2e%2e/", "//evil.example/console",
		"/\\evil.example/", "//\\evil.example/", "/\\/evil.example/", "/.//evil.example", "//./evil.example", "//..//evil.example",
		"/console//evil.example", "//console//evil.example/..", "//console/index.html", "/console/..//evil.example",
		"//%2Fevil.example/", "/%2F%2Fevil.example/", "//%2F/evil.example/", "//evil.example/?next=//evil.example",
		"//evil.example/api/v1/findings", "////evil.example//",
	} {
		for _, method := range []string{"GET", "HEAD"} {
			resp, _ := rawRequest(t, a, method, p)
			loc := resp.Header.Get("Location")
			if loc == "" {
				continue
			}
			ref, err := url.Parse(loc)
			if err != nil {
				t.Errorf("%s %s: Location %q does not parse: %v", method, p, loc, err)
				continue
			}
			// The base is the URL the browser asked for: the agent's
			// host and the request target as its path.
			base := &url.URL{Scheme: "http", Host: host, Path: "/"}
			if u, err := url.Parse("http://" + host + p); err == nil && u.Host == host {
				base = u
			}
			if got := base.ResolveReference(ref); got.Host != host || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") || ref.IsAbs() {
				t.Errorf("%s %s: Location %q leads to %s, off the agent's host %s", method, p, loc, got, host)
			}
		}
	}
}

// TestRemediation_ADoubledSlashKeepsTheKeyExact: the key travels in the
// query, which the leading-slash collapse leaves as it is. Keys that
// differ only in slashes ("//lock//a", "/lock/a", "lock/a") or in an
// encoded slash ("lock%2Fa") are four locks; a DELETE through
// "//api/v1/locks" with If-Match deletes exactly the one it names, whether
// the key is percent-encoded or not.
func TestRemediation_ADoubledSlashKeepsTheKeyExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := testenv.NewRedis(t)
	c := r.Client(t)
	keys := []string{"//lock//a", "/lock/a", "lock/a", "lock%2Fa"}
	value := map[string]string{}
	for i, k := range keys {
		value[k] = fmt.Sprintf("tok-immortal-%d %d {\"service\":\"billing\",\"pid\":%d}", i, i+1, i+1)
		if err := c.Set(ctx, k, value[k], 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	a := start(t, remediationConfig("agent", r, "tok"))
	for _, tc := range []struct{ key, target string }{
		{"//lock//a", "//api/v1/locks?key=%2F%2Flock%2F%2Fa"},
		{"/lock/a", "///api/v1/locks?key=/lock/a"},
		{"lock%2Fa", "//api/v1/locks?key=lock%252Fa"},
	} {
		resp, body := rawRequest(t, a, "DELETE", tc.target, "Authorization: Bearer tok", "If-Match: "+quoted(sha1hex(value[tc.key])))
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, fmt.Sprintf("%q", tc.key)) {
			t.Errorf("DELETE %s: %s %s, want 200 deleting %q", tc.target, answer(resp), body, tc.key)
		}
	}
	for _, k := range keys {
		n, err := c.Exists(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(map[bool]int{true: 1}[k == "lock/a"]); n != want {
			t.Errorf("%q: exists %d, want %d: each DELETE deletes the key it names, and only that", k, n, want)
		}
	}
}
