package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lockgov/lockgov/snowflake"
)

func init() {
	commands["id"] = command{
		summary: "decode and generate Snowflake IDs (id decode <id>..., id gen --worker N -n K)",
		run:     func(args []string) error { return idCmd(args, os.Stdout) },
	}
}

const idUsage = `usage:
  lockgov id decode [--layout L] [--epoch T] <id>...
  lockgov id gen --worker N [-n K] [--layout L] [--epoch T]

--layout is time/worker/sequence bits (default 41/10/12; 42/8/13; 41/5/7 is the
JavaScript-safe 53-bit layout) or a preset: default, 8x13, jssafe.
--epoch is RFC 3339 (default 2024-01-01T00:00:00Z).`

func idCmd(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return Usagef("missing subcommand\n%s", idUsage)
	}
	switch args[0] {
	case "decode":
		return idDecode(args[1:], stdout)
	case "gen":
		return idGen(args[1:], stdout)
	default:
		return Usagef("unknown subcommand %q\n%s", args[0], idUsage)
	}
}

// idFlags are the flags both subcommands share.
type idFlags struct {
	layout snowflake.Layout
	epoch  time.Time
}

func (f *idFlags) register(fs *flag.FlagSet) {
	f.layout, f.epoch = snowflake.DefaultLayout, snowflake.DefaultEpoch
	fs.Func("layout", "bit layout time/worker/sequence or preset (default 41/10/12)", func(s string) error {
		l, err := parseLayout(s)
		f.layout = l
		return err
	})
	fs.Func("epoch", "epoch, RFC 3339 (default 2024-01-01T00:00:00Z)", func(s string) error {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("want RFC 3339, like 2024-01-01T00:00:00Z")
		}
		f.epoch = t
		return nil
	})
}

func parseLayout(s string) (snowflake.Layout, error) {
	switch strings.ToLower(s) {
	case "default", "41x10x12":
		return snowflake.Layout41x10x12, nil
	case "8x13":
		return snowflake.Layout8x13, nil
	case "jssafe", "js":
		return snowflake.LayoutJSSafe, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return snowflake.Layout{}, fmt.Errorf("layout %q: want time/worker/sequence bits, like 41/10/12", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return snowflake.Layout{}, fmt.Errorf("layout %q: %q is not a number", s, p)
		}
		n[i] = v
	}
	l := snowflake.Layout{TimeBits: n[0], WorkerBits: n[1], SequenceBits: n[2]}
	if n[0]+n[1]+n[2] == 53 {
		l.Bits = 53
	}
	return l, l.Validate()
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("id "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, with idUsage
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Usagef("%s", idUsage)
		}
		return Usagef("%v\n%s", err, idUsage)
	}
	return nil
}

func idDecode(args []string, stdout io.Writer) error {
	var f idFlags
	fs := newFlagSet("decode")
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return Usagef("decode needs at least one id\n%s", idUsage)
	}
	for _, a := range fs.Args() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return Usagef("%q is not a decimal 64-bit integer", a)
		}
		p, err := f.layout.Decode(f.epoch, id)
		if err != nil {
			return UsageError{err}
		}
		fmt.Fprintf(stdout, "id=%d time=%s worker=%d sequence=%d layout=%s\n",
			p.ID, p.Time.Format("2006-01-02T15:04:05.000Z07:00"), p.Worker, p.Sequence, f.layout)
	}
	return nil
}

func idGen(args []string, stdout io.Writer) error {
	var f idFlags
	fs := newFlagSet("gen")
	f.register(fs)
	worker := fs.Int64("worker", -1, "WorkerID (required)")
	n := fs.Int("n", 1, "number of IDs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return Usagef("unexpected argument %q\n%s", fs.Arg(0), idUsage)
	case *worker < 0 && !flagSet(fs, "worker"):
		return Usagef("--worker is required (0..%d for layout %s)", f.layout.MaxWorker(), f.layout)
	case *n <= 0:
		return Usagef("-n %d: want n > 0", *n)
	}
	g, err := snowflake.New(*worker, snowflake.WithLayout(f.layout), snowflake.WithEpoch(f.epoch))
	if errors.Is(err, snowflake.ErrInvalid) {
		return UsageError{err}
	}
	if err != nil {
		return err
	}
	ids, err := g.NextN(context.Background(), *n)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, 20*len(ids))
	for _, id := range ids {
		buf = strconv.AppendInt(buf, id, 10)
		buf = append(buf, '\n')
	}
	_, err = stdout.Write(buf)
	return err
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
