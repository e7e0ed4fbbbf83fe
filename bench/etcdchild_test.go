package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// The etcd child serves from a process of its own, its CPU is read from there, and Close
// leaves nothing running.
func TestEtcdChild_ServesMeasuresAndStops(t *testing.T) {
	c, err := startEtcdChild()
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	if len(c.endpoints) == 0 || !strings.HasPrefix(c.endpoints[0], "http") {
		t.Fatalf("endpoints %q", c.endpoints)
	}
	e := &env{etcd: c.endpoints}
	cli, err := e.etcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	before, err := c.cpu()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Enough writes that the server's CPU moves past /proc's 10 ms resolution on any machine:
	// each is a raft round and a WAL fsync in the child, none of it in this process.
	for i := 0; i < 2000; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("bench/child/%d", i%50), "v"); err != nil {
			t.Fatal(err)
		}
	}
	after, err := c.cpu()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("the child's CPU did not move over 2000 writes: %v then %v", before, after)
	}

	c.Close()
	closed = true
	select {
	case <-c.done:
	default:
		t.Fatal("Close returned with the child still running")
	}
	if c.waitErr != nil {
		t.Errorf("the child exited with %v: %s", c.waitErr, c.stderr)
	}
	if _, err := c.cpu(); err == nil {
		t.Error("the child's /proc entry is still there after Close")
	}
}

func TestParseStatCPU(t *testing.T) {
	// utime 250 and stime 70 ticks: 3.2 s. The command name holds a space and a parenthesis.
	const stat = "4242 (bench (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 70 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3200*time.Millisecond {
		t.Errorf("parseStatCPU = %v, want 3.2s", got)
	}
	for _, bad := range []string{"", "4242 bench S 1", "4242 (bench) S 1 2 3", "4242 (bench) S 1 4242 4242 0 -1 4194560 1234 0 0 0 x 70 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
}

// The uncontended section refuses an env without the etcd server's CPU reader, by name,
// rather than reporting the etcd rows' server CPU as zero.
func TestRunUncontended_NeedsTheEtcdCPUReader(t *testing.T) {
	_, err := runUncontended(context.Background(), &env{}, withDefaults(config{quick: true}, 0, 0, 0, 0), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "etcd server's CPU") {
		t.Fatalf("err = %v, want one naming the etcd server's CPU reader", err)
	}
}
