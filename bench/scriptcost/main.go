// Command scriptcost counts the instructions redis-server runs per lock
// operation, under valgrind's callgrind: a figure that, unlike CPU time, does
// not move with the load of a shared machine, so that a change to a script
// can be judged by one run of before and after.
//
//	cd bench && go run ./scriptcost [-n 3000] [-keep]
//
// The cases: the raw pair (SET NX PX, then a compare-and-delete script),
// lockgov's uncontended Acquire + Release in both modes, two references
// that run scripts doing nothing, and one handoff under contention (a
// waiter's attempt that queues, the holder's Release that hands it the
// lock, and the message that tells the waiter) for lockgov in both modes
// and for the contention table's floor (bench/internal/floor). -keep keeps
// callgrind's dumps, one per case, for callgrind_annotate.
//
// It starts its own redis-server (no persistence, a free loopback port)
// under callgrind, and for each case runs a warm-up, zeroes the counters
// (callgrind_control -z), runs n operations one after another, and dumps
// the counters (callgrind_control -d). Instructions are user-space only: the
// kernel's share of a round trip (the reads and writes) is not counted, and
// is the same for a lock's two round trips whatever the scripts do. It needs
// valgrind (Debian: apt-get install -y valgrind); the runner's tables do not.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

func main() {
	n := flag.Int("n", 3000, "operations per case")
	server := flag.String("redis-server", "redis-server", "the redis-server binary")
	keep := flag.Bool("keep", false, "keep the callgrind dumps (one per case) and print where they are")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "scriptcost: -n must be at least 1")
		os.Exit(2)
	}
	if err := run(*n, *server, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

// kase is one measured operation; op runs it once for i.
type kase struct {
	name string
	op   func(ctx context.Context, i int) error
}

func run(n int, server string, keep bool) error {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (Debian: apt-get install -y valgrind): %w", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "scriptcost-")
	if err != nil {
		return err
	}
	defer func() {
		if keep {
			fmt.Printf("\ncallgrind dumps kept in %s (one per case, in order: callgrind_annotate --inclusive=yes %s.N)\n", dir, filepath.Join(dir, "callgrind.out"))
			return
		}
		_ = os.RemoveAll(dir)
	}()
	port, err := freePort()
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out,
		server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	log, err := os.Create(filepath.Join(dir, "valgrind.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server under valgrind: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ContextTimeoutEnabled: true,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer c.Close()
	if err := waitReady(ctx, c); err != nil {
		return err
	}
	cases, closeLockers, err := casesOn(c)
	if err != nil {
		return err
	}
	defer closeLockers()
	fmt.Printf("redis-server instructions per operation (callgrind, %d operations per case, one after another); %s\n\n", n, version(ctx, c))
	fmt.Println("| case | instructions per op | vs the raw pair |")
	fmt.Println("|---|---|---|")
	var raw float64
	for _, k := range cases {
		for i := range 200 { // scripts loaded, connections made, keys' dict grown
			if err := k.op(ctx, -1-i); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
		}
		if err := control(cmd.Process.Pid, "-z"); err != nil {
			return err
		}
		for i := range n {
			if err := k.op(ctx, i); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
		}
		if err := control(cmd.Process.Pid, "-d"); err != nil {
			return err
		}
		ir, err := lastDump(out)
		if err != nil {
			return err
		}
		per := float64(ir) / float64(n)
		if raw == 0 {
			raw = per
		}
		fmt.Printf("| %s | %.1fk | %.2fx |\n", k.name, per/1000, per/raw)
		if err := c.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// casesOn are the measured operations on c, the first the reference, and
// a func that closes the Lockers they use.
func casesOn(c *redis.Client) ([]kase, func(), error) {
	bare, err := redislock.New(c)
	if err != nil {
		return nil, nil, err
	}
	fair, err := redislock.New(c, redislock.Fair())
	if err != nil {
		_ = bare.Close()
		return nil, nil, err
	}
	hd, err := newHandoffs(c)
	if err != nil {
		_ = bare.Close()
		_ = fair.Close()
		return nil, nil, err
	}
	closeLockers := func() {
		hd.close()
		_ = bare.Close()
		_ = fair.Close()
	}
	const tok = "0123456789abcdefghijkl " // a lockgov token's length
	rawRelease := redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)
	nop := redis.NewScript(`return 1`)
	pair := func(l *redislock.Locker) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			lease, err := l.Acquire(ctx, "lock:cost:"+strconv.Itoa(i&15), instrument.WithTTL(30*time.Second))
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}
	}
	return []kase{
		{"raw pair: SET NX PX + EVALSHA (GET, DEL)", func(ctx context.Context, i int) error {
			k := "raw:cost:" + strconv.Itoa(i&15)
			if err := c.SetNX(ctx, k, tok, 30*time.Second).Err(); err != nil {
				return err
			}
			return rawRelease.Run(ctx, c, []string{k}, tok).Err()
		}},
		{"lockgov redislock: Acquire + Release", pair(bare)},
		{"lockgov redislock Fair(): Acquire + Release", pair(fair)},
		{"reference: two EVALSHA `return 1`, 1 key and 1 argument each", func(ctx context.Context, i int) error {
			for range 2 {
				if err := nop.Run(ctx, c, []string{"k"}, tok).Err(); err != nil {
					return err
				}
			}
			return nil
		}},
		{"reference: two EVALSHA `return 1` with acquire.lua's and release.lua's keys and arguments (2+4, 5+4)", func(ctx context.Context, i int) error {
			k := "{lock:cost:" + strconv.Itoa(i&15) + "}"
			meta := `{"service":"scriptcost","instance":"host-1/4242","acquired_at_ms":1764970000000,"ttl_ms":30000`
			if err := nop.Run(ctx, c, []string{k, k + ":fence"}, tok, 30000, meta, 630000).Err(); err != nil {
				return err
			}
			return nop.Run(ctx, c, []string{k, k + ":rel:0123456789ab", k + ":queue", k + ":fence", k + ":waiters"},
				tok, k+":released", 5000, 600000).Err()
		}},
		{"handoff floor: ZADD (a wait registered) + floor.Handoff to a subscriber, heard", hd.floor},
		{"lockgov handoff, default wait: a queued attempt + a Release that hands over, heard", hd.lockgov(0)},
		{"lockgov handoff, Fair(): a queued attempt + a Release that hands over, heard", hd.lockgov(1)},
	}, closeLockers, nil
}

func control(pid int, flag string) error {
	out, err := exec.Command("callgrind_control", flag, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", flag, err, out)
	}
	return nil
}

// lastDump returns the instruction count of the newest dump of out
// (callgrind writes out.1, out.2, ... one per callgrind_control -d).
func lastDump(out string) (int64, error) {
	files, err := filepath.Glob(out + ".*")
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no callgrind dump beside %s", out)
	}
	newest, part := "", 0
	for _, f := range files {
		if p, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(f), ".")); err == nil && p > part {
			newest, part = f, p
		}
	}
	if newest == "" {
		return 0, fmt.Errorf("no numbered callgrind dump beside %s", out)
	}
	f, err := os.Open(newest)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "summary: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no summary line", newest)
}

func waitReady(ctx context.Context, c *redis.Client) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server under valgrind did not answer in 60s: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func version(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "redis-server version unknown"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis-server " + v
		}
	}
	return "redis-server version unknown"
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("listener address %v is not TCP", ln.Addr())
	}
	return addr.Port, nil
}
