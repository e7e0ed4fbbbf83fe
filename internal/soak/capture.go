package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Capture is everything the run wrote where an owner token must never
// appear: span names, attributes, events and status, log lines, the
// registry's exposition, the agent's API answers and the heartbeat values
// read from Redis. It is written to a file as it comes (so holding it does
// not grow the heap the run measures), every line prefixed with its kind,
// and scanned once the run is over. Each kind has its own budget of
// maxBytes: past it, that kind's records are counted but no more of them are
// written (Dropped says how many), while the other kinds keep theirs. One
// shared budget let a 30-minute run's spans fill the file before the
// registry's exposition, recorded at the end, got a byte.
type Capture struct {
	mu       sync.Mutex
	f        *os.File
	w        *bufio.Writer
	n        map[string]int64 // bytes written per kind
	maxBytes int64            // per kind
	records  map[string]int64
	dropped  map[string]int64
	err      error
}

// NewCapture creates the capture file at path.
func NewCapture(path string, maxBytes int64) (*Capture, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Capture{f: f, w: bufio.NewWriterSize(f, 1<<16), maxBytes: maxBytes,
		n: map[string]int64{}, records: map[string]int64{}, dropped: map[string]int64{}}, nil
}

// Record writes data as one record of kind (each of its lines prefixed).
func (c *Capture) Record(kind string, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records[kind]++
	if c.maxBytes < 0 || c.maxBytes > 0 && c.n[kind]+int64(len(data)) > c.maxBytes {
		c.dropped[kind]++
		return
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		c.write(kind, kind)
		c.write(kind, "\t")
		c.writeBytes(kind, line)
		c.write(kind, "\n")
	}
}

func (c *Capture) write(kind, s string) {
	n, err := c.w.WriteString(s)
	c.n[kind] += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
}

func (c *Capture) writeBytes(kind string, b []byte) {
	n, err := c.w.Write(b)
	c.n[kind] += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
}

// Writer returns an io.Writer that records each Write as one record of
// kind (a slog handler writes one line per Write).
func (c *Capture) Writer(kind string) io.Writer { return captureWriter{c, kind} }

type captureWriter struct {
	c    *Capture
	kind string
}

func (w captureWriter) Write(p []byte) (int, error) {
	w.c.Record(w.kind, bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// Records returns how many records of each kind were seen, and how many of
// them were not written because the capture was full.
func (c *Capture) Records() (seen, dropped map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen, dropped = map[string]int64{}, map[string]int64{}
	for k, v := range c.records {
		seen[k] = v
	}
	for k, v := range c.dropped {
		dropped[k] = v
	}
	return seen, dropped
}

// Close flushes and closes the file; closing twice does nothing. Records
// after Close are counted, not written.
func (c *Capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return c.err
	}
	defer func() { c.f, c.maxBytes = nil, -1 }()
	if err := c.w.Flush(); err != nil && c.err == nil {
		c.err = err
	}
	if err := c.f.Close(); err != nil && c.err == nil {
		c.err = err
	}
	return c.err
}

// SpanProcessor records every span that ends: name, status, attributes,
// events with their attributes, and links. It keeps nothing in memory.
func (c *Capture) SpanProcessor() sdktrace.SpanProcessor { return spanCapture{c} }

type spanCapture struct{ c *Capture }

func (spanCapture) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (spanCapture) Shutdown(context.Context) error                  { return nil }
func (spanCapture) ForceFlush(context.Context) error                { return nil }

func (s spanCapture) OnEnd(sp sdktrace.ReadOnlySpan) {
	var b strings.Builder
	fmt.Fprintf(&b, "name=%q kind=%s status=%s:%q trace=%s span=%s", sp.Name(), sp.SpanKind(),
		sp.Status().Code, sp.Status().Description, sp.SpanContext().TraceID(), sp.SpanContext().SpanID())
	for _, a := range sp.Attributes() {
		fmt.Fprintf(&b, " %s=%q", a.Key, a.Value.Emit())
	}
	for _, e := range sp.Events() {
		fmt.Fprintf(&b, " event=%q", e.Name)
		for _, a := range e.Attributes {
			fmt.Fprintf(&b, " %s.%s=%q", e.Name, a.Key, a.Value.Emit())
		}
	}
	for _, l := range sp.Links() {
		fmt.Fprintf(&b, " link=%s/%s", l.SpanContext.TraceID(), l.SpanContext.SpanID())
		for _, a := range l.Attributes {
			fmt.Fprintf(&b, " link.%s=%q", a.Key, a.Value.Emit())
		}
	}
	s.c.Record("span", []byte(b.String()))
}

// Tokens is the set of owner tokens issued during a run: 16 random bytes,
// written as 22 base64url characters (redislock's framing).
type Tokens struct {
	set map[[16]byte]struct{}
}

// tokenLen is the length of a lock owner token as redislock writes it.
const tokenLen = 22

// LoadTokens reads the tokens file (one token a line) written by the run.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	t := &Tokens{set: map[[16]byte]struct{}{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if err := t.Add(sc.Text()); err != nil {
			return nil, err
		}
	}
	return t, sc.Err()
}

// Add adds one token.
func (t *Tokens) Add(tok string) error {
	if t.set == nil {
		t.set = map[[16]byte]struct{}{}
	}
	var k [16]byte
	if len(tok) != tokenLen {
		return fmt.Errorf("token %d characters long, want %d", len(tok), tokenLen)
	}
	if _, err := base64.RawURLEncoding.Decode(k[:], []byte(tok)); err != nil {
		return fmt.Errorf("token is not base64url: %w", err)
	}
	t.set[k] = struct{}{}
	return nil
}

// Len is the number of distinct tokens.
func (t *Tokens) Len() int { return len(t.set) }

// Hit is one token found in the capture.
type Hit struct {
	Kind string // span, log, metrics, api, heartbeat
	Line string // the line, with the token masked
}

// Scan reads a capture file and returns where any token occurs (up to 20
// hits) and how many lines of each kind it read. A token occurs only inside
// a run of base64url characters at least tokenLen long, so every window of
// tokenLen characters of every such run is looked up: exact, and linear in
// the size of the capture whatever the number of tokens.
func (t *Tokens) Scan(r io.Reader) (hits []Hit, lines map[string]int64, err error) {
	lines = map[string]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 256<<20)
	var k [16]byte
	for sc.Scan() {
		line := sc.Bytes()
		kind, body, _ := bytes.Cut(line, []byte("\t"))
		lines[string(kind)]++
		for i := 0; i < len(body); {
			if !isB64URL(body[i]) {
				i++
				continue
			}
			j := i
			for j < len(body) && isB64URL(body[j]) {
				j++
			}
			for s := i; s+tokenLen <= j; s++ {
				if _, err := base64.RawURLEncoding.Decode(k[:], body[s:s+tokenLen]); err != nil {
					continue // 22 characters whose last one has stray low bits: not an encoding of 16 bytes
				}
				if _, ok := t.set[k]; ok && len(hits) < 20 {
					masked := string(body[:s]) + "<TOKEN>" + string(body[s+tokenLen:])
					hits = append(hits, Hit{Kind: string(kind), Line: masked})
				}
			}
			i = j
		}
	}
	return hits, lines, sc.Err()
}

func isB64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// lineWriter writes lines to a file through a buffer.
type lineWriter struct {
	f   *os.File
	w   *bufio.Writer
	err error
}

func newLineWriter(f *os.File) *lineWriter {
	return &lineWriter{f: f, w: bufio.NewWriterSize(f, 1<<16)}
}

func (l *lineWriter) line(s string) {
	if l.f == nil {
		return
	}
	if _, err := l.w.WriteString(s + "\n"); err != nil && l.err == nil {
		l.err = err
	}
}

// close flushes and closes; closing twice does nothing.
func (l *lineWriter) close() error {
	if l.f == nil {
		return l.err
	}
	if err := l.w.Flush(); err != nil && l.err == nil {
		l.err = err
	}
	if err := l.f.Close(); err != nil && l.err == nil {
		l.err = err
	}
	l.f = nil
	return l.err
}
