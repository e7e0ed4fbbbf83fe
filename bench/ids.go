package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	bw "github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake/v2"

	"github.com/lockgov/lockgov/snowflake"
)

// layout is a snowflake bit layout. Two: the classic 41/10/12, whose speed limit is 4,096,000
// IDs/s per worker, and a roomy 41/1/21 with 2M IDs per millisecond, which measures each
// library's hot path rather than the layout's limit.
type layout struct {
	name                 string
	worker, sequenceBits int
}

var layouts = []layout{{"41x10x12", 10, 12}, {"41x1x21", 1, 21}}

// nextFunc returns one ID.
type nextFunc func() (int64, error)

// shared makes every goroutine use the same next.
func shared(next nextFunc) func() nextFunc { return func() nextFunc { return next } }

// idImpl makes a generator: worker returns the next func of one goroutine (all of them share
// one generator); close releases what make started.
type idImpl struct {
	name string
	make func(l layout) (worker func() nextFunc, close func(), err error)
}

const (
	idLockgov   = "lockgov NextID"
	idBatch     = "lockgov Fill (4096 per call)"
	idSegment   = "lockgov Segment.Next (4096 buffered)"
	idBwmarrin  = "bwmarrin/snowflake"
	idSonyflake = "sonyflake/v2"
	batchSize   = 4096
)

func lockgovGen(l layout) (*snowflake.Generator, error) {
	return snowflake.New(1, snowflake.WithLayout(snowflake.Layout{TimeBits: 41, WorkerBits: l.worker, SequenceBits: l.sequenceBits}))
}

func idImpls() []idImpl {
	ctx := context.Background()
	return []idImpl{
		{idLockgov, func(l layout) (func() nextFunc, func(), error) {
			g, err := lockgovGen(l)
			if err != nil {
				return nil, nil, err
			}
			return shared(func() (int64, error) { return g.NextID(ctx) }), func() {}, nil
		}},
		{idBatch, func(l layout) (func() nextFunc, func(), error) {
			g, err := lockgovGen(l)
			if err != nil {
				return nil, nil, err
			}
			// Each goroutine fills its own buffer of batchSize and hands IDs out of it.
			return func() nextFunc {
				buf := make([]int64, batchSize)
				var ids []int64
				return func() (int64, error) {
					if len(ids) == 0 {
						if err := g.Fill(ctx, buf); err != nil {
							return 0, err
						}
						ids = buf
					}
					id := ids[0]
					ids = ids[1:]
					return id, nil
				}
			}, func() {}, nil
		}},
		{idSegment, func(l layout) (func() nextFunc, func(), error) {
			g, err := lockgovGen(l)
			if err != nil {
				return nil, nil, err
			}
			s, err := snowflake.NewSegment(g, batchSize)
			if err != nil {
				return nil, nil, err
			}
			return shared(func() (int64, error) { return s.Next(ctx) }), func() { _ = s.Close() }, nil
		}},
		{idBwmarrin, func(l layout) (func() nextFunc, func(), error) {
			// bwmarrin keeps its bit widths in package variables, read by NewNode: cases run
			// one at a time, so setting them here is safe.
			bw.NodeBits, bw.StepBits = uint8(l.worker), uint8(l.sequenceBits)
			bw.Epoch = snowflake.DefaultEpoch.UnixMilli()
			n, err := bw.NewNode(1)
			if err != nil {
				return nil, nil, err
			}
			return shared(func() (int64, error) { return n.Generate().Int64(), nil }), func() {}, nil
		}},
		{idSonyflake, func(l layout) (func() nextFunc, func(), error) {
			sf, err := sonyflake.New(sonyflake.Settings{
				BitsSequence: l.sequenceBits, BitsMachineID: l.worker, TimeUnit: time.Millisecond,
				StartTime: snowflake.DefaultEpoch, MachineID: func() (int, error) { return 1, nil },
			})
			if err != nil {
				return nil, nil, err
			}
			return shared(sf.NextID), func() {}, nil
		}},
	}
}

// idRow is one generator on one layout at one parallelism: medians over the rounds.
type idRow struct {
	name       string
	layout     string
	goroutines int
	idsPerSec  float64
	nsPerID    float64
	allocs     float64
	limit      float64 // the layout's IDs/s limit for one worker
	ratioBw    float64 // idsPerSec / bwmarrin's in the same round
	rounds     []idRound
}

type idRound struct{ idsPerSec, allocs, ratioBw float64 }

// measureIDs calls next from g goroutines for d.
func measureIDs(worker func() nextFunc, g int, d time.Duration) (idRound, error) {
	var total atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	runtime.GC() // from a collected heap, as measurePairs
	m0, t0 := mallocs(), time.Now()
	end := t0.Add(d)
	for range g {
		next := worker()
		wg.Go(func() {
			n := int64(0)
			defer func() { total.Add(n) }()
			for {
				for range 256 {
					if _, err := next(); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
				n += 256
				if !time.Now().Before(end) {
					return
				}
			}
		})
	}
	wg.Wait()
	wall, allocs := time.Since(t0), mallocs()-m0
	if err, _ := firstErr.Load().(error); err != nil {
		return idRound{}, err
	}
	n := total.Load()
	return idRound{idsPerSec: float64(n) / wall.Seconds(), allocs: float64(allocs) / float64(max(n, 1))}, nil
}

func runIDs(ctx context.Context, cfg config, out io.Writer) ([]idRow, error) {
	impls := idImpls()
	par := runtime.GOMAXPROCS(0)
	type group struct {
		l layout
		g int
	}
	groups := []group{{layouts[0], 1}, {layouts[0], par}, {layouts[1], 1}, {layouts[1], par}}
	var rows []idRow
	for _, gr := range groups {
		base := len(rows)
		idx := map[string]int{}
		for i, im := range impls {
			idx[im.name] = base + i
			rows = append(rows, idRow{name: im.name, layout: gr.l.name, goroutines: gr.g,
				limit: float64(int64(1)<<gr.l.sequenceBits) * 1000})
		}
		for round := range cfg.rounds {
			got := map[string]idRound{}
			for _, im := range roundOrder(impls, round) {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				next, closeFn, err := im.make(gr.l)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", im.name, err)
				}
				r, err := measureIDs(next, gr.g, cfg.idDur)
				closeFn()
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", im.name, gr.l.name, err)
				}
				got[im.name] = r
			}
			for name, r := range got {
				r.ratioBw = r.idsPerSec / got[idBwmarrin].idsPerSec
				rows[idx[name]].rounds = append(rows[idx[name]].rounds, r)
			}
		}
		fmt.Fprintf(out, "  %s, %d goroutine(s): ", gr.l.name, gr.g)
		for _, im := range impls {
			row := &rows[idx[im.name]]
			summarizeIDRow(row)
			fmt.Fprintf(out, "%s %.1fM/s  ", im.name, row.idsPerSec/1e6)
		}
		fmt.Fprintln(out)
	}
	return rows, nil
}

func summarizeIDRow(r *idRow) {
	var ips, allocs, ratio []float64
	for _, x := range r.rounds {
		ips, allocs, ratio = append(ips, x.idsPerSec), append(allocs, x.allocs), append(ratio, x.ratioBw)
	}
	r.idsPerSec, r.allocs, r.ratioBw = median(ips), median(allocs), median(ratio)
	if r.idsPerSec > 0 {
		r.nsPerID = 1e9 / r.idsPerSec
	}
}
