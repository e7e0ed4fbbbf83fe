package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lockgov/lockgov/internal/agent"
	"github.com/lockgov/lockgov/internal/shellquote"
	"github.com/lockgov/lockgov/policy"
)

var locksEnv = map[string]string{"redis": "LOCKGOV_REDIS", "etcd": "LOCKGOV_ETCD", "policy": "LOCKGOV_POLICY"}

type locksFlags struct {
	redis, patterns []string
	etcd, policy    string
	output          string
	timeout         time.Duration
}

func (f *locksFlags) register(cmd *cobra.Command) {
	fs := cmd.PersistentFlags()
	fs.StringArrayVar(&f.redis, "redis", nil, "Redis URL (repeatable; see lockgov agent --help)")
	fs.StringVar(&f.etcd, "etcd", "", "etcd endpoints, comma-separated")
	fs.StringVar(&f.policy, "policy", "", "policy file: labels keys with its patterns")
	fs.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
}

func newLocksCmd() *cobra.Command {
	var f locksFlags
	locks := &cobra.Command{
		Use:   "locks",
		Short: "list and show the locks in Redis or etcd (locks ls, locks show KEY)",
		Long: `List and show lockgov's locks (and other libraries' locks under the same
patterns) with their holder, key pattern, age, TTL, fence and version (what the
agent's DELETE /api/v1/locks takes as If-Match). Owner tokens are never shown.
Unset --redis, --etcd and --policy come from LOCKGOV_REDIS (space-separated),
LOCKGOV_ETCD and LOCKGOV_POLICY.

A key is bytes. In the table, a key (or a pattern or holder) that is not UTF-8
or that a terminal would not print as itself (a newline, a tab, an escape
sequence, a bidirectional override, an invisible code point such as a
zero-width space or a variation selector) is shown as a shell's $'...' quoting writes it: \xNN for each byte
outside printable ASCII, \\ and \' for a backslash and a quote. A shell turns
it back into the bytes (lockgov locks show $'lock:\xff'), but for a NUL, which
no argument carries; -o json gives them as key_base64. Columns are separated
by runs of spaces: a key, pattern or store with a space in it (or beginning
with a quote), and a holder's service or instance with one, is shown in
single quotes as a shell writes it ('lock:a  b', 'it'\''s'), so that it reads
as one cell and pastes as one argument. A note on stderr says when the table
escaped or quoted anything.

-o json is for programs, not a terminal: valid UTF-8 JSON as encoding/json
writes it, with the controls below U+0020 escaped but C1 controls
(U+0080-U+009F), bidirectional overrides and invisible code points as they
are. A holder's service, instance or host that is not UTF-8 has U+FFFD in
place of each such byte (the lock value's JSON cannot carry it); only a key
has key_base64.`,
		Args: noCommand,
		RunE: showHelp,
	}
	f.register(locks)
	ls := &cobra.Command{
		Use:   "ls [--redis URL | --etcd EP] [--pattern P] [-o table|json]",
		Short: "list locks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, func(ctx context.Context, in *agent.Inventory, out *lockWriter) error {
				return in.List(ctx, func(l agent.Lock) bool { return out.write(l) == nil })
			})
		},
	}
	ls.Flags().StringArrayVar(&f.patterns, "pattern", nil, "Redis SCAN pattern (repeatable; default lock:*)")
	show := &cobra.Command{
		Use:   "show KEY",
		Short: "show the lock on KEY",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				// On etcd the empty key is the whole lock prefix: it would
				// show another key's lock.
				return Usagef("locks show: KEY is empty; give the key the lock was acquired with")
			}
			return f.run(cmd, func(ctx context.Context, in *agent.Inventory, out *lockWriter) error {
				ls, err := in.Show(ctx, args[0])
				if err != nil {
					return err
				}
				if len(ls) == 0 {
					return fmt.Errorf("no lock on %q in %s", args[0], strings.Join(in.Stores(), ", "))
				}
				for _, l := range ls {
					if err := out.write(l); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	locks.AddCommand(ls, show)
	return locks
}

func (f *locksFlags) run(cmd *cobra.Command, body func(context.Context, *agent.Inventory, *lockWriter) error) error {
	if err := envFlags(cmd.Flags(), locksEnv); err != nil {
		return err
	}
	if f.output != "table" && f.output != "json" {
		return Usagef("-o %q: want table or json", f.output)
	}
	if f.timeout <= 0 {
		return Usagef("--timeout %v: want > 0", f.timeout)
	}
	var pol *policy.Policy
	if f.policy != "" {
		var err error
		if pol, err = policy.Load(f.policy); err != nil {
			return UsageError{err}
		}
	}
	cfg := &agent.Config{Redis: f.redis, Etcd: agent.SplitList(f.etcd)}
	if err := agent.CheckConfig(cfg); err != nil {
		return UsageError{err}
	}
	in, err := agent.OpenInventory(cfg.Redis, cfg.Etcd, f.patterns, pol)
	if errors.Is(err, agent.ErrNoStore) {
		return UsageError{err}
	}
	if err != nil {
		return err
	}
	defer in.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	out := newLockWriter(cmd.OutOrStdout(), f.output, len(in.Stores()) > 1)
	err = body(ctx, in, out)
	if ferr := out.flush(); err == nil {
		err = ferr
	}
	if out.escaped > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d values shown escaped, as $'...' or '...': \\xNN is a byte that is not printable text, \\\\ a backslash, \\' a quote; a shell reads them back (lockgov locks show $'...'), -o json gives a key's bytes as key_base64\n",
			cmd.CommandPath(), out.escaped)
	}
	return err
}

// lockWriter prints locks as a table or as JSON lines (one object a line,
// so a listing of a million keys streams).
type lockWriter struct {
	json      bool
	enc       *json.Encoder
	tw        *tabwriter.Writer
	withStore bool
	header    bool
	rows      int
	escaped   int // cells shown escaped (shown)
}

func newLockWriter(w io.Writer, format string, withStore bool) *lockWriter {
	if format == "json" {
		return &lockWriter{json: true, enc: json.NewEncoder(w)}
	}
	return &lockWriter{tw: tabwriter.NewWriter(w, 2, 8, 2, ' ', 0), withStore: withStore}
}

func (w *lockWriter) write(l agent.Lock) error {
	if w.json {
		return w.enc.Encode(l)
	}
	if !w.header {
		w.header = true
		h := "KEY\tPATTERN\tHOLDER\tAGE\tTTL\tFENCE\tVERSION"
		if w.withStore {
			h = "STORE\t" + h
		}
		fmt.Fprintln(w.tw, h)
	}
	// tabwriter holds every row until Flush: flush per block, so that a
	// listing of a million keys streams (columns align within a block).
	if w.rows++; w.rows%1000 == 0 {
		if err := w.tw.Flush(); err != nil {
			return err
		}
	}
	row := strings.Join([]string{w.shown(l.Key), w.shown(l.Pattern), w.cell(w.holder(l)), age(l.Age), ttl(l),
		strconv.FormatUint(l.Fence, 10), version(l)}, "\t")
	if w.withStore {
		row = w.shown(l.Store) + "\t" + row
	}
	_, err := fmt.Fprintln(w.tw, row)
	return err
}

// shown returns a name (a key, pattern or store) as a table cell: cell(s),
// and quoted as a shell quotes it (shellquote.Quote: 'lock:a  b') when it
// holds a space or begins with a quote. The table's columns are separated
// by runs of spaces: a key holding one would read as several cells (a
// key, a holder, an age), a trailing space would not show, and a key
// beginning with a quote would read as a quoted one. Quoted, it reads as
// one cell and pastes as one argument (lockgov locks show 'lock:a  b').
func (w *lockWriter) shown(s string) string {
	if needsQuote(s) && clean(s) {
		w.escaped++
		return shellquote.Quote(s)
	}
	return w.cell(s)
}

func needsQuote(s string) bool { return strings.ContainsRune(s, ' ') || strings.HasPrefix(s, "'") }

// clean reports whether s prints as itself: UTF-8, every rune printable
// and visible (see unseen).
func clean(s string) bool { return utf8.ValidString(s) && strings.IndexFunc(s, unseen) < 0 }

// cell returns s as a table cell: as it is when it is UTF-8 that a
// terminal prints as itself (every rune printable and visible, see unseen:
// no newline, tab, escape sequence, bidirectional control or invisible
// code point), not empty and not beginning with $'
// (it would read as an escaped cell). Otherwise escaped, as a POSIX shell's
// $'...' quoting writes s: \xNN for each byte outside printable ASCII, as
// the agent console shows a key that is not UTF-8 and the findings' actions
// quote one, and \\ and \' for a backslash and a quote. A shell reads it
// back into s's bytes. A key printed as it is could print a row of its own
// (a newline), rewrite the terminal (an escape sequence), shift the columns
// (a tab), or, not being UTF-8, print as another key.
func (w *lockWriter) cell(s string) string {
	if s != "" && !strings.HasPrefix(s, "$'") && clean(s) {
		return s
	}
	w.escaped++
	return shellquote.ANSIC(s)
}

// unseen reports whether a terminal would not show r as itself: r is not
// printable (a control, a format character such as a bidirectional
// override or a zero-width space, a separator other than the space), or
// is printable to unicode.IsPrint but default-ignorable, rendered as
// nothing (a combining grapheme joiner, a variation selector, a Hangul
// filler): "lock:order:1" followed by one of those would show as
// lock:order:1.
func unseen(r rune) bool {
	return !unicode.IsPrint(r) || unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

func (w *lockWriter) flush() error {
	if w.tw != nil {
		return w.tw.Flush()
	}
	return nil
}

// holder is the HOLDER cell's text: "service@instance pid N". A service or
// instance with a space in it, or beginning with a quote, is quoted as a
// shell quotes it ('svc  x'@pod-1 pid 7), so that it reads as one name.
func (w *lockWriter) holder(l agent.Lock) string {
	h := l.Holder
	name := func(s string) string {
		if needsQuote(s) && clean(s) {
			w.escaped++
			return shellquote.Quote(s)
		}
		return s
	}
	switch {
	case h.Foreign:
		return "foreign (not written by lockgov)"
	case h.Instance != "" && h.Service != "":
		return name(h.Service) + "@" + name(h.Instance) + " pid " + strconv.Itoa(h.PID)
	case h.Service != "":
		return name(h.Service) + " pid " + strconv.Itoa(h.PID)
	}
	return "pid " + strconv.Itoa(h.PID)
}

// version is the lock's version (lockversion), "-" when the store gave
// none.
func version(l agent.Lock) string {
	if l.Version == "" {
		return "-"
	}
	return l.Version
}

func age(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func ttl(l agent.Lock) string {
	if l.Immortal() {
		return "none (immortal)"
	}
	return l.TTL.Round(time.Millisecond).String()
}
