package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lockgov/lockgov/snowflake"
)

const idLong = `Decode and generate Snowflake IDs.

--layout is time/worker/sequence bits (default 41/10/12; 42/8/13; 41/5/7 is the
JavaScript-safe 53-bit layout) or a preset: default, 8x13, jssafe.
--epoch is RFC 3339 (default 2024-01-01T00:00:00Z).`

func newIDCmd() *cobra.Command {
	id := &cobra.Command{
		Use:   "id",
		Short: "decode and generate Snowflake IDs (id decode <id>..., id gen --worker N -n K)",
		Long:  idLong,
		Args:  noCommand,
		RunE:  showHelp,
	}
	var df idFlags
	decode := &cobra.Command{
		Use:   "decode [--layout L] [--epoch T] <id>...",
		Short: "print the time, worker and sequence of IDs",
		Long:  idLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			return idDecode(&df, args, cmd.OutOrStdout())
		},
	}
	df.register(decode.Flags())
	var gf idFlags
	var worker int64
	var n int
	gen := &cobra.Command{
		Use:   "gen --worker N [-n K] [--layout L] [--epoch T]",
		Short: "generate IDs as worker N",
		Long:  idLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			return idGen(&gf, worker, cmd.Flags().Changed("worker"), n, args, cmd.OutOrStdout())
		},
	}
	gf.register(gen.Flags())
	gen.Flags().Int64Var(&worker, "worker", 0, "WorkerID (required)") // required: gen checks Changed, so no default shows
	gen.Flags().IntVarP(&n, "count", "n", 1, "number of IDs")
	id.AddCommand(decode, gen)
	return id
}

// idCmd runs lockgov id with args, for tests.
func idCmd(args []string, stdout io.Writer) error {
	root := newRoot(stdout, io.Discard)
	root.SetArgs(append([]string{"id"}, args...))
	_, err := root.ExecuteC()
	if errors.Is(err, errShownHelp) {
		return Usagef("missing subcommand")
	}
	return err
}

// idFlags are the flags both subcommands share.
type idFlags struct {
	layout snowflake.Layout
	epoch  time.Time
}

func (f *idFlags) register(fs *pflag.FlagSet) {
	f.layout, f.epoch = snowflake.DefaultLayout, snowflake.DefaultEpoch
	fs.Var(layoutValue{&f.layout}, "layout", "bit layout time/worker/sequence, or a preset")
	fs.Var(epochValue{&f.epoch}, "epoch", "epoch, RFC 3339")
}

type layoutValue struct{ l *snowflake.Layout }

func (v layoutValue) String() string {
	if v.l == nil {
		return ""
	}
	return v.l.String()
}
func (v layoutValue) Type() string { return "layout" }
func (v layoutValue) Set(s string) error {
	l, err := parseLayout(s)
	*v.l = l
	return err
}

type epochValue struct{ t *time.Time }

func (v epochValue) String() string {
	if v.t == nil {
		return ""
	}
	// RFC3339Nano, the form Set parses: an epoch with a fraction of a
	// second is shown as given, not truncated (found by FuzzEpochFlag).
	return v.t.Format(time.RFC3339Nano)
}
func (v epochValue) Type() string { return "time" }
func (v epochValue) Set(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("want RFC 3339, like 2024-01-01T00:00:00Z")
	}
	*v.t = t
	return nil
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

func idDecode(f *idFlags, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return Usagef("decode needs at least one id")
	}
	for _, a := range args {
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

func idGen(f *idFlags, worker int64, workerSet bool, n int, args []string, stdout io.Writer) error {
	switch {
	case len(args) > 0:
		return Usagef("unexpected argument %q", args[0])
	case !workerSet:
		return Usagef("--worker is required (0..%d for layout %s)", f.layout.MaxWorker(), f.layout)
	case n <= 0:
		return Usagef("-n %d: want n > 0", n)
	}
	g, err := snowflake.New(worker, snowflake.WithLayout(f.layout), snowflake.WithEpoch(f.epoch))
	if errors.Is(err, snowflake.ErrInvalid) {
		return UsageError{err}
	}
	if err != nil {
		return err
	}
	ids, err := g.NextN(context.Background(), n)
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
