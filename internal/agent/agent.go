package agent

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/telemetry"
	"github.com/lockgov/lockgov/policy"
)

// Limits of what one record (and so one API answer) keeps.
const (
	maxRecordLocks     = 1000
	maxRecordInstances = 10000
)

// Stores are the clients of the deployments the agent watches, for the
// detectors. Names are redacted addresses (no user, no password).
type Stores struct {
	Redis []RedisStore
	Etcd  []EtcdStore
}

// RedisStore is one Redis deployment.
type RedisStore struct {
	Name   string
	Client redis.UniversalClient
}

// EtcdStore is one etcd cluster.
type EtcdStore struct {
	Name   string
	Client *clientv3.Client
}

// DetectorsFunc builds the detectors of one agent from its stores and policy.
type DetectorsFunc func(Stores, *policy.Policy) ([]detectors.Detector, error)

// BuildDetectors is the agent's default DetectorsFunc: the leaked-lock
// detector on every store, the store-configuration detector (eviction) on
// every Redis store, and the detectors that read heartbeats (clock
// skew, deadlocks, WorkerIDs) once, over the heartbeats of every store, so a
// fleet whose processes publish into several stores is one fleet and no
// finding is reported once per store. WorkerID slots are looked up in the
// first store (etcd before Redis).
func BuildDetectors(s Stores, pol *policy.Policy) ([]detectors.Detector, error) {
	var all []detectors.Store
	for _, e := range s.Etcd {
		st, err := detectors.NewEtcdStore(e.Client, detectors.WithAddr(e.Name))
		if err != nil {
			return nil, err
		}
		all = append(all, st)
	}
	for _, r := range s.Redis {
		st, err := detectors.NewRedisStore(r.Client, detectors.WithAddr(r.Name))
		if err != nil {
			return nil, err
		}
		all = append(all, st)
	}
	if len(all) == 0 {
		return nil, nil
	}
	var ds []detectors.Detector
	add := func(d detectors.Detector, err error) error {
		if err == nil {
			ds = append(ds, d)
		}
		return err
	}
	for i, st := range all {
		others := append(append([]detectors.Store{}, all[:i]...), all[i+1:]...)
		if err := add(detectors.NewLocks(st, detectors.WithPolicy(pol), detectors.WithHeartbeatsFrom(others...))); err != nil {
			return nil, err
		}
	}
	first, rest := all[0], all[1:]
	if err := add(detectors.NewClock(first, detectors.WithPolicy(pol), detectors.WithHeartbeatsFrom(rest...))); err != nil {
		return nil, err
	}
	if err := add(detectors.NewDeadlock(first, detectors.WithHeartbeatsFrom(rest...))); err != nil {
		return nil, err
	}
	if err := add(detectors.NewWorkerIDs(first, detectors.WithHeartbeatsFrom(rest...))); err != nil {
		return nil, err
	}
	for _, st := range all {
		if st.Backend() != "redis" { // etcd does not evict
			continue
		}
		if err := add(detectors.NewStoreConfig(st)); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// Option configures Start.
type Option interface{ apply(*options) }

type options struct {
	detectors DetectorsFunc
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithDetectors replaces BuildDetectors.
func WithDetectors(f DetectorsFunc) Option {
	return optionFunc(func(o *options) { o.detectors = f })
}

// Agent is one running agent. Start it, Close it.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	pol      *policy.Policy
	stores   []*store
	coord    *store // where agents elect and the leader publishes
	embedded *embeddedEtcd
	elect    elector
	dets     []detectors.Detector
	lister   *lister
	m        *metrics
	srv      *http.Server
	url      string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	clocks clocks // offsets of etcd-only processes (tier.go)
	// runs are the last completed run of each of dets in this term; only
	// the leading goroutine (lead, scan) touches them.
	runs []detectorRun

	mu       sync.RWMutex
	rec      record
	leading  bool
	fence    uint64
	health   map[string]error
	lastSeen uint64 // the largest fence of a record read as a follower
	otherLed bool   // a record of another leader was read since this agent last led
}

// record is one scan as the leader publishes it and every agent serves it.
type record struct {
	// Findings are this scan's, and the stale ones kept from the last
	// completed run of a detector that did not complete this scan.
	Findings  []finding `json:"findings"`
	ScannedAt time.Time `json:"scanned_at"`
	LeaderID  string    `json:"leader_id"`
	Fence     uint64    `json:"fence"`
	// Errors are detectors and stores that failed in this scan.
	Errors []string `json:"errors,omitempty"`
	// Detectors say, detector by detector, when each last completed and
	// why it did not complete this scan.
	Detectors      []detectorStatus `json:"detectors,omitempty"`
	Locks          []Lock           `json:"locks"`
	LocksTruncated bool             `json:"locks_truncated,omitempty"`
	Instances      []Instance       `json:"instances"`
}

// Start opens the stores (an embedded etcd when none is given), starts the
// election, the scans, the health checks and the HTTP server, and prints
// the console URL on a line of its own. Close stops it; ctx only carries
// values (the agent runs until Close, whatever happens to ctx).
func Start(ctx context.Context, cfg Config, opts ...Option) (_ *Agent, err error) {
	o := options{detectors: BuildDetectors}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, health: map[string]error{}}
	defer func() {
		if err != nil {
			a.closeStores()
		}
	}()
	a.pol = policy.Default()
	if cfg.Policy != "" {
		if a.pol, err = policy.Load(cfg.Policy); err != nil {
			return nil, err
		}
	}
	a.lister = &lister{patterns: cfg.Patterns, match: policy.NewMatcher(a.pol), now: time.Now}
	if a.stores, err = openRedis(cfg.Redis, cfg.RedisAuth); err != nil {
		return nil, err
	}
	if len(cfg.Etcd) > 0 {
		s, err := openEtcd(cfg.Etcd, cfg.EtcdAuth)
		if err != nil {
			return nil, err
		}
		a.stores = append(a.stores, s)
	}
	if len(a.stores) == 0 || cfg.EmbedEtcd {
		if a.embedded, err = startEmbedded(cfg.DataDir, cfg.EmbedClientURL, cfg.EmbedPeerURL); err != nil {
			return nil, err
		}
		ep := a.embedded.Clients[0].Addr().String()
		s, err := openEtcd([]string{"http://" + ep}, StoreAuth{})
		if err != nil {
			return nil, err
		}
		a.stores = append(a.stores, s)
		a.log.Info("agent: no store given; started an embedded single-node etcd",
			"endpoint", "http://"+ep, "data", a.embedded.Config().Dir,
			"hint", "point processes at it with etcdlock on clientv3 endpoint http://"+ep+", and further agents with --etcd http://"+ep)
	}
	var st Stores
	for _, s := range a.stores {
		if s.etcd != nil {
			st.Etcd = append(st.Etcd, EtcdStore{Name: s.name, Client: s.etcd})
			if a.coord == nil || a.coord.redis != nil {
				a.coord = s
			}
		} else {
			st.Redis = append(st.Redis, RedisStore{Name: s.name, Client: s.redis})
			if a.coord == nil {
				a.coord = s
			}
		}
	}
	if a.dets, err = o.detectors(st, a.pol); err != nil {
		return nil, fmt.Errorf("detectors: %w", err)
	}
	if a.coord.etcd != nil {
		a.elect = &etcdElector{s: a.coord, id: cfg.ID, interval: cfg.Interval, log: a.log}
	} else {
		l, err := redislock.New(a.coord.redis, redislock.WithService("lockgov-agent"), redislock.WithInstance(cfg.ID))
		if err != nil {
			return nil, err
		}
		a.elect = &redisElector{s: a.coord, locker: l, interval: cfg.Interval, log: a.log}
	}
	a.m = newMetrics(a)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	a.url = "http://" + ln.Addr().String() + "/"
	a.srv = &http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	a.checkHealth(runCtx) // /readyz answers from the first request on
	a.goRun(func() { _ = a.srv.Serve(ln) })
	a.goRun(func() { a.healthLoop(runCtx) })
	a.goRun(func() { a.elect.run(runCtx, a.lead) })
	a.goRun(func() { a.followLoop(runCtx) })
	for _, s := range a.stores {
		if s.etcd != nil {
			a.goRun(func() { a.watchClocks(runCtx, s) })
		}
	}
	fmt.Fprintln(cfg.Stdout, a.url)
	a.log.Info("agent: ready", "console", a.url, "id", cfg.ID, "stores", len(a.stores), "interval", cfg.Interval,
		"remediation", cfg.RemediationToken != "")
	return a, nil
}

func (a *Agent) goRun(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// URL is the console URL, http://HOST:PORT/.
func (a *Agent) URL() string { return a.url }

// Leader reports whether the agent leads now.
func (a *Agent) Leader() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.leading
}

// Close stops the agent: a leader resigns, so another agent takes over at
// once. It waits for every goroutine the agent started.
func (a *Agent) Close() error {
	a.cancel()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := a.srv.Shutdown(sctx)
	cancel()
	a.wg.Wait()
	a.closeStores()
	return err
}

func (a *Agent) closeStores() {
	for _, s := range a.stores {
		_ = s.close()
	}
	if a.embedded != nil {
		a.embedded.Close()
	}
}

// lead runs the scans of one term: at once, then every interval.
func (a *Agent) lead(t term) {
	// The gauge changes with the flag, under one lock: whoever sees
	// Leader() true scrapes lockgov_agent_leader 1.
	a.mu.Lock()
	a.leading, a.fence = true, t.fence
	a.m.leader.Set(1)
	otherLed := a.otherLed
	a.otherLed = false
	a.mu.Unlock()
	if otherLed {
		// Another agent led since this one last did, and counted what
		// Redis evicted meanwhile: counted here too, from this agent's
		// counts of its last term, it rose this agent's
		// lockgov_agent_store_evicted_keys_total (a second page, twice
		// in a sum over agents) and made the first scan critical for
		// evictions perhaps long over. Counting afresh loses what Redis
		// evicted between that leader's last scan and this one's first.
		// Without another leader (the coordination store was out of
		// reach), nobody counted the evictions of the gap: they are
		// counted here.
		for _, d := range a.dets {
			if r, ok := d.(interface{ Reset() }); ok {
				r.Reset()
			}
		}
	}
	// What a detector remembers from an earlier term is not continuous
	// with this one (detectors.Locks.NewTerm): where a process was not
	// publishing then says nothing about now.
	for _, d := range a.dets {
		if n, ok := d.(interface{ NewTerm() }); ok {
			n.NewTerm()
		}
	}
	// Findings kept for a detector that fails are this term's: a new term
	// starts from the last record this agent read (seedRuns).
	a.runs = a.seedRuns()
	a.log.Info("agent: leading", "id", a.cfg.ID, "fence", t.fence)
	defer func() {
		a.mu.Lock()
		a.leading = false
		a.m.leader.Set(0)
		a.mu.Unlock()
		// Only the leader exports findings and skew: a sum over agents
		// counts each finding once.
		a.m.setFindings(nil)
		a.m.detectorSuccess.Reset()
		a.m.skew.Reset()
		a.m.maxMemory.Reset()
		a.m.policy.Reset()
		a.log.Info("agent: no longer leading", "id", a.cfg.ID)
	}()
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		a.scan(t)
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scan runs the detectors and the inventory once and publishes the
// result. Every detector, and each store's lock inventory and heartbeat
// read, runs side by side with the others under its own ScanTimeout: a
// store that is slow or paused fails only what reads it, instead of using
// up one shared timeout and leaving every later detector a dead context.
// A detector that does not complete keeps the findings of its last
// completed run in this term, marked stale (see finding).
func (a *Agent) scan(t term) {
	start := time.Now()
	rec := record{LeaderID: a.cfg.ID, Fence: t.fence, Findings: []finding{}, Locks: []Lock{}, Instances: []Instance{}}
	// The leaked-lock detectors read every lock and count them; the
	// inventory then only needs the first maxRecordLocks locks of a store,
	// so it stops there instead of scanning every store a second time.
	// (Without such a detector, the inventory reads every key to count
	// them.)
	counted := false
	for _, d := range a.dets {
		if _, ok := d.(interface{ Scanned() uint64 }); ok {
			counted = true
		}
	}
	type detected struct {
		fs  []detectors.Finding
		err error
		at  time.Time
	}
	type inventory struct {
		locks     []Lock
		truncated bool
		keys      int64
		locksErr  error
		instances []Instance
		instErr   error
	}
	dets := make([]detected, len(a.dets))
	invs := make([]inventory, len(a.stores))
	bounded := func(f func(ctx context.Context)) {
		ctx, cancel := context.WithTimeout(t.ctx, a.cfg.ScanTimeout)
		defer cancel()
		f(ctx)
	}
	var wg sync.WaitGroup
	for i, d := range a.dets {
		wg.Go(func() {
			bounded(func(ctx context.Context) {
				fs, err := d.Detect(ctx)
				dets[i] = detected{fs, err, time.Now()}
			})
		})
	}
	for i, s := range a.stores {
		wg.Go(func() {
			bounded(func(ctx context.Context) {
				inv := &invs[i]
				inv.keys, inv.locksErr = a.lister.list(ctx, s, func(l Lock) bool {
					if len(inv.locks) < maxRecordLocks {
						inv.locks = append(inv.locks, l)
						return true
					}
					inv.truncated = true
					return !counted
				})
			})
		})
		wg.Go(func() {
			bounded(func(ctx context.Context) {
				invs[i].instances, invs[i].instErr = readInstances(ctx, s, maxRecordInstances)
			})
		})
	}
	wg.Wait()
	if t.ctx.Err() != nil {
		return // the term ended during the scan: a newer leader publishes
	}

	reads := 0 // reads that succeeded: a scan with none read nothing
	for i, d := range a.dets {
		r := dets[i]
		if c, ok := d.(interface{ Scanned() uint64 }); ok {
			a.m.keysScanned.Add(float64(c.Scanned()))
		}
		run := &a.runs[i]
		st := detectorStatus{Detector: d.Name(), Store: detectorStore(d)}
		var pe *detectors.PartialError
		partial := r.err != nil && errors.As(r.err, &pe)
		if r.err != nil {
			rec.Errors = append(rec.Errors, "detector "+d.Name()+": "+r.err.Error())
			st.Error = r.err.Error()
			// A partial run's findings are real and published as they
			// are; of the last completed run's, only those it could not
			// check (pe.Covers) and did not make again stand, stale. It
			// is no completed run: run, and so LastSuccess and its gauge,
			// stay at the last one.
			// A finding of the locks detector on a lock key made again
			// replaces the stale one whatever its holder: a lock has one
			// holder, and the old holder's finding beside the new one
			// counted one lock twice. (Other detectors' findings on one
			// key, such as a WorkerID's claimants, are each their own.)
			fresh := map[findingID]bool{}
			if partial {
				for _, f := range r.fs {
					fresh[idOf(f)] = true
					if f.Detector == detectors.DetectorLocks {
						fresh[findingID{kind: f.Kind, store: f.Store, key: f.Key}] = true
					}
					rec.Findings = append(rec.Findings, finding{Finding: f})
				}
			}
			for _, f := range run.findings {
				made := fresh[idOf(f)] || (f.Detector == detectors.DetectorLocks && fresh[findingID{kind: f.Kind, store: f.Store, key: f.Key}])
				if !partial || (pe.Covers(f) && !made) {
					rec.Findings = append(rec.Findings, finding{Finding: f, Stale: true, DetectedAt: run.at})
				}
			}
		} else {
			run.findings, run.at = r.fs, r.at
			for _, f := range r.fs {
				rec.Findings = append(rec.Findings, finding{Finding: f})
			}
		}
		st.LastSuccess = run.at
		rec.Detectors = append(rec.Detectors, st)
		if r.err != nil && !partial {
			continue
		}
		if e, ok := d.(interface {
			Eviction() (detectors.Eviction, bool)
		}); ok {
			// INFO is no read of the locks: a scan that read only INFO
			// (an ACL that refuses SCAN) completed nothing.
			a.m.setEviction(e.Eviction())
			continue
		}
		reads++
	}
	for i, s := range a.stores {
		inv := invs[i]
		if !counted {
			a.m.keysScanned.Add(float64(inv.keys))
		}
		if room := maxRecordLocks - len(rec.Locks); len(inv.locks) > room {
			inv.locks, inv.truncated = inv.locks[:room], true
		}
		rec.Locks = append(rec.Locks, inv.locks...)
		rec.LocksTruncated = rec.LocksTruncated || inv.truncated
		if inv.locksErr != nil {
			rec.Errors = append(rec.Errors, "locks on "+s.name+": "+inv.locksErr.Error())
		} else {
			reads++
		}
		rec.Instances = append(rec.Instances, inv.instances[:min(len(inv.instances), maxRecordInstances-len(rec.Instances))]...)
		if inv.instErr != nil {
			rec.Errors = append(rec.Errors, "heartbeats on "+s.name+": "+inv.instErr.Error())
		} else {
			reads++
		}
	}
	tctx, cancel := context.WithTimeout(t.ctx, a.cfg.ScanTimeout)
	rec.Errors = append(rec.Errors, a.writeTiers(tctx)...)
	cancel()
	rec.ScannedAt = time.Now()
	// A scan every read of which failed (a store that answers PING but
	// refuses SCAN, a scan past its timeout) completed nothing: counting it
	// would keep LockgovAgentScanFailing ("every scan fails") silent while
	// the findings stay empty. A scan that read one store of two counts;
	// LockgovAgentStoreDown names the other, and LockgovAgentScanIncomplete
	// a detector that keeps failing.
	if reads > 0 || len(rec.Errors) == 0 {
		a.m.scanDuration.Observe(time.Since(start).Seconds())
	}
	a.m.setFindings(rec.Findings)
	a.m.setDetectors(rec.Detectors)
	a.m.setSkew(rec.Instances)
	for _, e := range rec.Errors {
		a.log.Warn("agent: scan", "err", e)
	}
	a.mu.Lock()
	a.rec = rec
	a.mu.Unlock()
	if err := a.publish(t, rec); err != nil && t.ctx.Err() == nil {
		// A publish ended by the term's end (the agent stopping, or
		// another leader elected) is no store failure: not logged.
		a.log.Warn("agent: publish findings", "store", a.coord.name, "err", err)
	}
}

//go:embed publish.lua
var publishSrc string

var publishScript = redis.NewScript(publishSrc)

// publish writes rec for the followers, under a TTL of three intervals.
func (a *Agent) publish(t term, rec record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, a.cfg.ScanTimeout)
	defer cancel()
	ttl := 3 * a.cfg.Interval
	if a.coord.etcd != nil {
		lease, err := a.coord.etcd.Grant(ctx, max(int64(ttl/time.Second), 1))
		if err != nil {
			return err
		}
		// Written only while this term's leader key stands (its create
		// revision is the fence): a deposed leader writes nothing.
		resp, err := a.coord.etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(t.etcdKey), "=", int64(t.fence))).
			Then(clientv3.OpPut(etcdRecordKey, string(data), clientv3.WithLease(lease.ID))).
			Commit()
		if err == nil && !resp.Succeeded {
			err = errors.New("no longer the leader")
		}
		return err
	}
	fence := strconv.FormatUint(t.fence, 10)
	n, err := publishScript.Run(ctx, a.coord.redis, []string{redisRecordKey}, fence, fence+" "+string(data), ttl.Milliseconds()).Int()
	if err == nil && n == 0 {
		err = errors.New("a later leader published already")
	}
	return err
}

// followLoop serves the leader's record while this agent follows.
func (a *Agent) followLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		if !a.Leader() {
			if err := a.follow(ctx); err != nil && ctx.Err() == nil {
				a.log.Debug("agent: read the leader's findings", "store", a.coord.name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) follow(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ScanTimeout)
	defer cancel()
	var data []byte
	if a.coord.etcd != nil {
		resp, err := a.coord.etcd.Get(ctx, etcdRecordKey)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		data = resp.Kvs[0].Value
	} else {
		v, err := a.coord.redis.Get(ctx, redisRecordKey).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err != nil {
			return err
		}
		_, js, _ := strings.Cut(v, " ")
		data = []byte(js)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("leader's record: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.leading || rec.Fence < a.lastSeen {
		return nil
	}
	a.lastSeen, a.rec = rec.Fence, rec
	a.otherLed = a.otherLed || rec.LeaderID != a.cfg.ID
	return nil
}

// healthLoop checks every store every interval.
func (a *Agent) healthLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.checkHealth(ctx)
		}
	}
}

// pingTimeout bounds one health check's pings: the scan timeout, at most
// half an interval. A store that goes down just after a check is seen at
// the next tick (one interval) once its ping times out (half of one more):
// /readyz turns 503 within two intervals, as documented, with room to spare
// for a slow machine. A ping bounded by the scan timeout alone (the
// interval by default) made that two intervals and then some.
func (a *Agent) pingTimeout() time.Duration {
	return min(a.cfg.ScanTimeout, a.cfg.Interval/2)
}

// checkHealth pings every store at once, each bounded by pingTimeout.
func (a *Agent) checkHealth(ctx context.Context) {
	errs := make([]error, len(a.stores))
	var wg sync.WaitGroup
	for i, s := range a.stores {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, a.pingTimeout())
			defer cancel()
			errs[i] = s.ping(pctx)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, s := range a.stores {
		was, seen := a.health[s.name]
		a.health[s.name] = errs[i]
		switch {
		case errs[i] != nil:
			a.m.storeUp.WithLabelValues(s.name).Set(0)
			if !seen || was == nil {
				a.log.Warn("agent: store down", "store", s.name, "err", errs[i])
			}
		default:
			a.m.storeUp.WithLabelValues(s.name).Set(1)
			if seen && was != nil {
				a.log.Info("agent: store back", "store", s.name)
			}
		}
	}
}

// notReady returns why the agent is not ready: one line per store down.
func (a *Agent) notReady() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []string
	for _, s := range a.stores {
		if err := a.health[s.name]; err != nil {
			out = append(out, "store "+s.name+": "+err.Error())
		}
	}
	return out
}

type metrics struct {
	reg      *prometheus.Registry
	findings *prometheus.GaugeVec
	// findingSeries are the label values of the findings series exported
	// now, with their counts.
	findingSeries   map[[3]string]int
	detectorSuccess *prometheus.GaugeVec
	skew            *prometheus.GaugeVec
	scanDuration    prometheus.Observer
	keysScanned     prometheus.Counter
	leader          prometheus.Gauge
	storeUp         *prometheus.GaugeVec
	maxMemory       *prometheus.GaugeVec
	policy          *prometheus.GaugeVec
	evicted         *prometheus.CounterVec
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.findings = telemetry.Findings.GaugeVec(nil)
	m.skew = telemetry.ClockSkewSeconds.GaugeVec(nil)
	keys := telemetry.AgentKeysScannedTotal.CounterVec(nil)
	m.keysScanned = keys.WithLabelValues()
	leader := telemetry.AgentLeader.GaugeVec(nil)
	m.leader = leader.WithLabelValues()
	m.storeUp = telemetry.AgentStoreUp.GaugeVec(nil)
	hist := telemetry.AgentScanDuration.HistogramVec(nil)
	m.scanDuration = hist.WithLabelValues()
	m.maxMemory = telemetry.AgentStoreMaxMemoryBytes.GaugeVec(nil)
	m.policy = telemetry.AgentStoreMaxMemoryPolicy.GaugeVec(nil)
	m.evicted = telemetry.AgentStoreEvictedKeysTotal.CounterVec(nil)
	m.detectorSuccess = telemetry.AgentDetectorLastSuccess.GaugeVec(nil)
	m.reg.MustRegister(m.findings, m.skew, hist, keys, leader, m.storeUp, m.maxMemory, m.policy, m.evicted, m.detectorSuccess)
	m.leader.Set(0)
	for _, s := range a.stores {
		m.storeUp.WithLabelValues(s.name).Set(0)
	}
	return m
}

// setFindings exports the counts of fs. A series that stays is set, never
// deleted and made again: a scrape between the two would miss it, and its
// alert's `for:` would start over.
func (m *metrics) setFindings(fs []finding) {
	counts := map[[3]string]int{}
	for _, f := range fs {
		counts[[3]string{f.Detector, f.Kind, f.Severity}]++
	}
	for k := range m.findingSeries {
		if _, ok := counts[k]; !ok {
			m.findings.DeleteLabelValues(k[0], k[1], k[2])
		}
	}
	for k, n := range counts {
		m.findings.WithLabelValues(k[0], k[1], k[2]).Set(float64(n))
	}
	m.findingSeries = counts
}

// setDetectors exports when each detector last completed: Unix seconds, 0
// when it has not in this term. Detectors with the same name and store
// (only possible with WithDetectors) share a series: the oldest.
func (m *metrics) setDetectors(ds []detectorStatus) {
	last := map[[2]string]float64{}
	for _, d := range ds {
		v := 0.0
		if !d.LastSuccess.IsZero() {
			v = float64(d.LastSuccess.UnixNano()) / 1e9
		}
		k := [2]string{d.Detector, d.Store}
		if old, ok := last[k]; ok {
			v = min(v, old)
		}
		last[k] = v
	}
	for k, v := range last {
		m.detectorSuccess.WithLabelValues(k[0], k[1]).Set(v)
	}
}

// setEviction exports what a store-configuration detector's last Detect
// read. The evicted-keys counter counts the rises the leader saw: its first
// scan of a store creates the series at 0.
func (m *metrics) setEviction(ev detectors.Eviction, ok bool) {
	if !ok {
		return
	}
	m.policy.DeletePartialMatch(prometheus.Labels{"store": ev.Store})
	m.policy.WithLabelValues(ev.Store, ev.Policy).Set(1)
	if ev.MaxMemory >= 0 {
		m.maxMemory.WithLabelValues(ev.Store).Set(float64(ev.MaxMemory))
	} else {
		m.maxMemory.DeleteLabelValues(ev.Store)
	}
	m.evicted.WithLabelValues(ev.Store).Add(float64(ev.NewlyEvicted))
}

func (m *metrics) setSkew(is []Instance) {
	m.skew.Reset()
	for _, i := range is {
		if i.ClockOffsetSeconds != nil {
			m.skew.WithLabelValues(i.Service, i.Instance).Set(*i.ClockOffsetSeconds)
		}
	}
}
