package testenv

import (
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestPostgres_StartsPrivateServerAndCleansUp(t *testing.T) {
	p, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	if p.Port() == 5432 {
		t.Fatal("took the system server's port")
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p.Port()), time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", p.DSN(), err)
	}
	c.Close()
	dir := p.dir
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s left behind: %v", dir, err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
