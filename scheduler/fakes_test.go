package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"agent/event"
	"agent/store"
)

// waitTimeout bounds how long a test waits for the engine's goroutines in
// real time. Nothing depends on it being short: it only turns a hang into
// a failure, so it is generous: a loaded machine may take seconds to run
// a goroutine.
const waitTimeout = time.Minute

// fakeClock is a settable Clock. After's channels fire when the clock is
// moved past their deadline.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []clockWaiter
}

type clockWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, clockWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Set moves the clock to t (never backwards) and fires due waiters.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

func (c *fakeClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// startCall is one Dispatcher.Start.
type startCall struct {
	job   Job
	tick  Tick
	at    time.Time // the clock when Start was called
	runID string
	done  chan Result
}

// fakeDispatcher records Start and Cancel. By default a run goes on until
// the test finishes it; result, if set, ends runs at once. Cancel ends a
// run as cancelled unless stubborn, which models a process that outlives
// its cancellation until the test finishes it.
type fakeDispatcher struct {
	clock    Clock
	result   func(Tick) *Result
	startErr error
	stubborn bool

	mu       sync.Mutex
	calls    []*startCall
	cancels  []string
	finished map[string]bool
	changed  chan struct{} // closed and replaced on every Start and Cancel
}

func newFakeDispatcher(clock Clock) *fakeDispatcher {
	return &fakeDispatcher{clock: clock, finished: map[string]bool{}, changed: make(chan struct{})}
}

func (d *fakeDispatcher) Start(ctx context.Context, job Job, tick Tick) (string, <-chan Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.signal()
	if d.startErr != nil {
		return "", nil, d.startErr
	}
	c := &startCall{job: job, tick: tick, at: d.clock.Now(), runID: fmt.Sprintf("run-%d", len(d.calls)+1), done: make(chan Result, 1)}
	d.calls = append(d.calls, c)
	if d.result != nil {
		if r := d.result(tick); r != nil {
			d.finishLocked(c.runID, *r)
		}
	}
	return c.runID, c.done, nil
}

func (d *fakeDispatcher) Cancel(runID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.signal()
	d.cancels = append(d.cancels, runID)
	if !d.stubborn {
		d.finishLocked(runID, Result{Status: event.StatusCancelled, Err: "cancelled"})
	}
}

// finish ends a run: its process is gone.
func (d *fakeDispatcher) finish(runID string, r Result) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.finishLocked(runID, r)
}

func (d *fakeDispatcher) finishLocked(runID string, r Result) {
	if d.finished[runID] {
		return
	}
	for _, c := range d.calls {
		if c.runID == runID {
			d.finished[runID] = true
			c.done <- r
			close(c.done)
		}
	}
}

func (d *fakeDispatcher) signal() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *fakeDispatcher) snapshot() (calls []*startCall, cancels []string, changed chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls), slices.Clone(d.cancels), d.changed
}

// waitStarts waits until at least n runs were started and returns them.
func (d *fakeDispatcher) waitStarts(t *testing.T, n int) []*startCall {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		calls, _, changed := d.snapshot()
		if len(calls) >= n {
			return calls
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waited for %d run starts, got %d", n, len(calls))
		}
	}
}

func (d *fakeDispatcher) waitCancels(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		_, cancels, changed := d.snapshot()
		if len(cancels) >= n {
			return cancels
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waited for %d cancels, got %d", n, len(cancels))
		}
	}
}

func (d *fakeDispatcher) starts() []*startCall {
	calls, _, _ := d.snapshot()
	return calls
}

// recorder collects events.
type recorder struct {
	mu      sync.Mutex
	evs     []event.Event
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(ev event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	close(r.changed)
	r.changed = make(chan struct{})
}

// of returns the events of this type so far, with their data.
func (r *recorder) of(typ string) []TickData {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []TickData
	for _, ev := range r.evs {
		if ev.Type == typ {
			var d TickData
			if err := ev.Decode(&d); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// wait waits until at least n events of this type were published.
func (r *recorder) wait(t *testing.T, typ string, n int) []TickData {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if got := r.of(typ); len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waited for %d %s events, got %d", n, typ, len(r.of(typ)))
		}
	}
}

// harness is an engine on a real SQLite store with a fake clock,
// dispatcher and event sink.
type harness struct {
	t     *testing.T
	db    *store.DB
	clock *fakeClock
	disp  *fakeDispatcher
	rec   *recorder
	cfg   Config
	eng   *Engine

	mu       sync.Mutex
	started  bool      // h.eng was started
	gen      int       // how many times the loop went idle
	deadline time.Time // when the loop's timer fires
	idleCh   chan struct{}
}

// t0 is where test clocks start: a Saturday, 10:00:30 UTC.
var t0 = time.Date(2026, 1, 3, 10, 0, 30, 0, time.UTC)

func newHarness(t *testing.T, start time.Time, opts ...func(*Config)) *harness {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := newFakeClock(start)
	db.Now = clock.Now
	h := &harness{t: t, db: db, clock: clock, disp: newFakeDispatcher(clock), rec: newRecorder(), idleCh: make(chan struct{})}
	h.cfg = Config{
		Store: db, Dispatcher: h.disp, Clock: clock, Rand: func() float64 { return 0.5 },
		PollInterval: 5 * time.Second, Events: h.rec.add,
	}
	for _, o := range opts {
		o(&h.cfg)
	}
	h.eng = h.newEngine()
	return h
}

// newEngine returns a new engine on the harness's store and fakes, as a
// restarted gateway would have.
func (h *harness) newEngine() *Engine {
	h.t.Helper()
	eng, err := New(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	eng.idle = func(wait time.Duration) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.gen++
		h.deadline = h.clock.Now().Add(wait)
		close(h.idleCh)
		h.idleCh = make(chan struct{})
	}
	return eng
}

// start starts h.eng and waits for its first look at the store.
func (h *harness) start() {
	h.t.Helper()
	gen := h.idleGen()
	if err := h.eng.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(h.eng.Stop)
	h.started = true
	h.waitIdle(gen + 1)
}

// stop stops h.eng, as a gateway shutting down does.
func (h *harness) stop() {
	h.eng.Stop()
	h.started = false
}

func (h *harness) idleGen() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

func (h *harness) waitIdle(gen int) {
	h.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		h.mu.Lock()
		g, ch := h.gen, h.idleCh
		h.mu.Unlock()
		if g >= gen {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			h.t.Fatal("the engine loop did not go idle")
		}
	}
}

// advanceTo moves the clock to target, stopping at each of the loop's
// wake-ups until it has looked at the store and gone idle again: ticks
// fire at their own time, as on a real clock.
func (h *harness) advanceTo(target time.Time) {
	h.t.Helper()
	for h.clock.Now().Before(target) {
		h.mu.Lock()
		gen, deadline := h.gen, h.deadline
		h.mu.Unlock()
		if deadline.After(target) {
			h.clock.Set(target)
			return
		}
		h.clock.Set(deadline)
		h.waitIdle(gen + 1)
	}
}

func (h *harness) advance(d time.Duration) { h.advanceTo(h.clock.Now().Add(d)) }

// jump moves the clock by d at once, as after a suspend or a clock step,
// and waits for the loop to look at the store.
func (h *harness) jump(d time.Duration) {
	h.t.Helper()
	gen := h.idleGen()
	h.clock.Advance(d)
	h.waitIdle(gen + 1)
}

// create creates a job through the engine.
func (h *harness) create(spec JobSpec) Job {
	h.t.Helper()
	if spec.Prompt == "" {
		spec.Prompt = "do {{.JobName}}"
	}
	gen := h.idleGen()
	j, err := h.eng.CreateJob(context.Background(), spec)
	if err != nil {
		h.t.Fatal(err)
	}
	if h.started {
		h.waitIdle(gen + 1) // the nudge made the loop look again
	}
	return j
}

// runs returns a job's runs, oldest first.
func (h *harness) runs(jobID string) []store.JobRun {
	h.t.Helper()
	rs, err := h.db.JobRuns(context.Background(), jobID, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	slices.Reverse(rs)
	return rs
}

// statuses returns the statuses of a job's runs, oldest first.
func (h *harness) statuses(jobID string) []string {
	var out []string
	for _, r := range h.runs(jobID) {
		out = append(out, r.Status)
	}
	return out
}

// waitStatuses waits until a job's runs have these statuses.
func (h *harness) waitStatuses(jobID string, want ...string) {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := h.statuses(jobID)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job runs %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) job(id string) store.Job {
	h.t.Helper()
	j, err := h.db.GetJob(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return *j
}

func policy(mod func(*Policy)) *Policy {
	p := DefaultPolicy()
	mod(&p)
	return &p
}
