package worker

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"agent/event"
	"agent/store"
	"agent/store/pgtest"
	"agent/supervisor"
)

// These tests run a real worker on a real store (a SQLite file: the queue
// is the same SQL on PostgreSQL, which only adds notifications) and stand
// in for the supervisor's driving, so that what the worker starts, and
// when, can be watched without model children.

// patience bounds every wait for something the worker should do.
const patience = 30 * time.Second

// kindAttempt is what a driven phase attempt is, beside store.KindRun and
// store.KindHarness.
const kindAttempt = "attempt"

// driven is a run or a phase attempt the worker started.
type driven struct {
	kind  string          // store.KindRun, store.KindHarness or kindAttempt
	id    string          // the run's id, or the attempt's key
	ctx   context.Context // the worker cancels it to stop the run
	drive supervisor.Drive
	// finish ends it as completed; ended is closed once it returns to
	// the worker, which its context's cause then was (nil: none).
	finish chan struct{}
	ended  chan struct{}
	cause  error
}

// testWorker is a worker whose driving is faked: each run or attempt it
// starts is sent on started, and lasts until the test finishes it or the
// worker stops it.
type testWorker struct {
	t       *testing.T
	db      *store.DB
	owner   string
	started chan *driven
	// harness, if set, drives harness runs instead.
	harness func(ctx context.Context, r *store.Run)
	logs    chan slog.Record
	// listening gets a signal each time the worker listens for queued
	// runs (PostgreSQL only).
	listening chan struct{}
	done      chan error // Run's return
	stop      func()     // cancels Run's context and waits for it to return
}

// startWorker runs a worker on db with n slots, polling every poll; setup,
// if not nil, changes the test worker before it starts.
func startWorker(t *testing.T, db *store.DB, n int, poll time.Duration, setup func(*testWorker)) *testWorker {
	t.Helper()
	sup, err := supervisor.New(supervisor.Config{DB: db, Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tw := &testWorker{
		t: t, db: db, owner: sup.Owner(), started: make(chan *driven, 64),
		logs: make(chan slog.Record, 256), listening: make(chan struct{}, 1), done: make(chan error, 1),
	}
	if setup != nil {
		setup(tw)
	}
	w, err := New(Config{
		DB: db, Sup: sup, Concurrency: n, Poll: poll, RunTimeout: 7 * time.Minute,
		Logger: slog.New(recorder{tw.logs}), drive: tw.drive, driveAttempt: tw.driveAttempt,
		listening: func() { wake(tw.listening) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { tw.done <- w.Run(ctx) }()
	tw.stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-tw.done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(patience):
			t.Errorf("the worker did not stop within %s", patience)
		}
	})
	t.Cleanup(tw.stop)
	return tw
}

// drive stands in for Sup.Drive: it ends the run as completed when the
// test finishes it, or as its context's cause says when the worker stops
// it, and gives its lease up, as Sup.Drive does.
func (tw *testWorker) drive(ctx context.Context, r *store.Run, d supervisor.Drive) (supervisor.End, error) {
	x := &driven{kind: r.Kind, id: r.ID, ctx: ctx, drive: d, finish: make(chan struct{}), ended: make(chan struct{})}
	defer func() { x.cause = context.Cause(ctx); close(x.ended) }()
	tw.started <- x
	if r.Kind == store.KindHarness && tw.harness != nil {
		tw.harness(ctx, r)
	} else {
		select {
		case <-x.finish:
		case <-ctx.Done():
		}
	}
	out := supervisor.Outcome{Cause: context.Cause(ctx)}
	if ctx.Err() == nil {
		out.Report = &event.RunnerResultData{Status: event.StatusCompleted}
	}
	typ, fin := supervisor.Ending(out)
	if err := tw.db.ReleaseLease(context.WithoutCancel(ctx), r.ID, tw.owner); err != nil {
		tw.t.Errorf("release run %s: %v", r.ID, err)
	}
	return supervisor.End{Type: typ, Data: fin}, nil
}

// driveAttempt stands in for Sup.DriveAttempt: it leaves the attempt's
// result for its harness when the test finishes it or the worker stops it.
func (tw *testWorker) driveAttempt(ctx context.Context, u *store.AttemptUnit) error {
	x := &driven{kind: kindAttempt, id: u.AttemptKey.String(), ctx: ctx, finish: make(chan struct{}), ended: make(chan struct{})}
	defer func() { x.cause = context.Cause(ctx); close(x.ended) }()
	tw.started <- x
	status := event.StatusCompleted
	select {
	case <-x.finish:
	case <-ctx.Done():
		status = event.StatusCancelled
	}
	return tw.db.FinishAttempt(context.WithoutCancel(ctx), u.AttemptKey, tw.owner, json.RawMessage(`{"status":"`+status+`"}`))
}

// next waits for the worker to start something.
func (tw *testWorker) next() *driven {
	tw.t.Helper()
	select {
	case x := <-tw.started:
		return x
	case err := <-tw.done:
		tw.t.Fatalf("the worker returned (%v) while the test waited for it to start something", err)
	case <-time.After(patience):
		tw.t.Fatalf("the worker started nothing within %s", patience)
	}
	return nil
}

// nextN waits for the worker to start n things, and returns them by id.
func (tw *testWorker) nextN(n int) map[string]*driven {
	tw.t.Helper()
	got := map[string]*driven{}
	for range n {
		x := tw.next()
		got[x.id] = x
	}
	return got
}

// ids lists the ids of what was started, for messages.
func ids(got map[string]*driven) []string {
	var out []string
	for id, x := range got {
		out = append(out, x.kind+" "+id)
	}
	return out
}

// awaitStop waits for the worker to stop x and returns the cause.
func awaitStop(t *testing.T, x *driven) error {
	t.Helper()
	select {
	case <-x.ctx.Done():
		return context.Cause(x.ctx)
	case <-time.After(patience):
		t.Fatalf("%s %s was not stopped within %s", x.kind, x.id, patience)
	}
	return nil
}

// awaitEnd waits for x to return to the worker.
func awaitEnd(t *testing.T, x *driven) {
	t.Helper()
	select {
	case <-x.ended:
	case <-time.After(patience):
		t.Fatalf("%s %s did not end within %s", x.kind, x.id, patience)
	}
}

// recorder is a log handler that sends each record on a channel, dropping
// those nobody waits for.
type recorder struct{ ch chan slog.Record }

func (h recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h recorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recorder) WithGroup(string) slog.Handler            { return h }
func (h recorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}

func openStore(t *testing.T) (*store.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// queue queues a run of kind in a session of its own, as a gateway does.
func queue(t *testing.T, db *store.DB, kind, id string) {
	t.Helper()
	ctx := context.Background()
	if err := db.CreateSession(ctx, &store.Session{ID: "s-" + id}); err != nil {
		t.Fatal(err)
	}
	r := &store.Run{ID: id, Kind: kind, SessionID: "s-" + id, Prompt: "do it", Config: json.RawMessage(`{}`), Queue: event.StatusWaiting}
	if err := db.CreateRun(ctx, r, "", 0); err != nil {
		t.Fatal(err)
	}
}

// elsewhere is the lease owner of a harness run another worker drives.
const elsewhere = "another-host/1/x"

// attemptElsewhere queues a phase attempt of a harness run another worker
// drives, and returns its key.
func attemptElsewhere(t *testing.T, db *store.DB, runID string) store.AttemptKey {
	t.Helper()
	ctx := context.Background()
	if err := db.CreateSession(ctx, &store.Session{ID: "s-" + runID}); err != nil {
		t.Fatal(err)
	}
	r := &store.Run{ID: runID, Kind: store.KindHarness, SessionID: "s-" + runID, Prompt: "do it", Config: json.RawMessage(`{}`)}
	if err := db.CreateRun(ctx, r, elsewhere, time.Hour); err != nil {
		t.Fatal(err)
	}
	k := store.AttemptKey{RunID: runID, PhaseID: "build", Attempt: 1}
	u := store.AttemptUnit{AttemptKey: k, SessionID: r.SessionID, Spec: json.RawMessage(`{}`)}
	if err := db.QueueAttempt(ctx, u, elsewhere); err != nil {
		t.Fatal(err)
	}
	return k
}

// stillQueued fails t unless every run of ids still waits for a worker.
func stillQueued(t *testing.T, db *store.DB, why string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r, err := db.GetRun(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Queue != event.StatusWaiting {
			t.Fatalf("run %s was claimed (queue %q, lease %q): %s", id, r.Queue, r.LeaseOwner, why)
		}
	}
}

// With one slot and one of each kind queued, the phase attempt gets the
// child slot (its harness, driven elsewhere, waits on it), the harness run
// gets a harness slot, and the single run waits for the attempt to end.
func TestAttemptsAreClaimedFirst(t *testing.T) {
	t.Parallel()
	db, _ := openStore(t)
	k := attemptElsewhere(t, db, "h0")
	queue(t, db, store.KindRun, "r1")
	queue(t, db, store.KindHarness, "h1")

	// No poll: only the end of the attempt wakes the worker later.
	tw := startWorker(t, db, 1, time.Hour, nil)
	got := tw.nextN(2)
	a, h := got[k.String()], got["h1"]
	if a == nil || a.kind != kindAttempt || h == nil || h.kind != store.KindHarness {
		t.Fatalf("with one slot the worker started %v, want the attempt %s and the harness run h1", ids(got), k)
	}
	// h1 was claimed after the worker last looked for a single run.
	stillQueued(t, db, "the attempt holds the only child slot", "r1")

	close(a.finish)
	r := tw.next()
	if r.id != "r1" || r.kind != store.KindRun {
		t.Fatalf("after the attempt ended the worker started %s %s, want the run r1", r.kind, r.id)
	}
	if u, err := db.GetAttemptUnit(context.Background(), k); err != nil || u.Result == nil {
		t.Fatalf("the attempt's result was not left for its harness: %+v, %v", u, err)
	}
}

// On PostgreSQL a run queued while a worker idles starts at once: queueing
// it notifies the workers, so none waits for its next poll (an hour here).
func TestQueuedRunWakesAnIdleWorker(t *testing.T) {
	t.Parallel()
	db, err := store.Open(pgtest.Database(t, pgtest.Start(t), ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tw := startWorker(t, db, 1, time.Hour, nil)
	select {
	case <-tw.listening:
	case <-time.After(patience):
		t.Fatalf("the worker did not listen for queued runs within %s", patience)
	}
	queue(t, db, store.KindRun, "r1")
	if x := tw.next(); x.id != "r1" {
		t.Fatalf("the worker started %s %s, want the run r1 just queued", x.kind, x.id)
	}
}

// N slots: N children (single runs here) and N harness runs at once, no
// more; a run that ends frees its slot and the next queued run of its
// kind is claimed at once, with no poll.
func TestSlots(t *testing.T) {
	t.Parallel()
	db, _ := openStore(t)
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		queue(t, db, store.KindRun, id)
	}
	for _, id := range []string{"h1", "h2", "h3"} {
		queue(t, db, store.KindHarness, id)
	}

	tw := startWorker(t, db, 2, time.Hour, nil)
	got := tw.nextN(4)
	for _, id := range []string{"r1", "r2", "h1", "h2"} {
		if got[id] == nil {
			t.Fatalf("with two slots the worker started %v, want r1, r2, h1 and h2", ids(got))
		}
	}
	stillQueued(t, db, "both child slots are full", "r3", "r4")
	for _, x := range got {
		if x.kind == store.KindRun && (!x.drive.Child || x.drive.Resume || time.Duration(x.drive.Options.Timeout) != 7*time.Minute) {
			t.Errorf("run %s driven with %+v, want a fresh child bounded by the worker's run timeout", x.id, x.drive)
		}
	}

	close(got["r1"].finish)
	if x := tw.next(); x.id != "r3" {
		t.Fatalf("after r1 ended the worker started %s %s, want r3 in its slot", x.kind, x.id)
	}
	// r3 was claimed in a later look than the first, which took h2.
	stillQueued(t, db, "both harness slots are full", "h3")

	close(got["h1"].finish)
	if x := tw.next(); x.id != "h3" {
		t.Fatalf("after h1 ended the worker started %s %s, want h3 in its slot", x.kind, x.id)
	}
	// h3 was claimed after the worker last looked for a single run.
	stillQueued(t, db, "both child slots are still full", "r4")
}

// A harness run holds no child slot: with one slot, the phase attempt the
// harness queues and waits for is claimed and run by the same worker.
func TestHarnessDoesNotBlockItsAttempts(t *testing.T) {
	t.Parallel()
	db, _ := openStore(t)
	queue(t, db, store.KindHarness, "h1")
	k := store.AttemptKey{RunID: "h1", PhaseID: "build", Attempt: 1}

	tw := startWorker(t, db, 1, 20*time.Millisecond, func(tw *testWorker) {
		// As Sup.Drive does with QueueAttempts: queue the attempt, and
		// wait for its result in the store.
		tw.harness = func(ctx context.Context, r *store.Run) {
			u := store.AttemptUnit{AttemptKey: k, SessionID: r.SessionID, Spec: json.RawMessage(`{}`)}
			if err := tw.db.QueueAttempt(ctx, u, tw.owner); err != nil {
				tw.t.Errorf("queue the attempt: %v", err)
				return
			}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				if u, err := tw.db.GetAttemptUnit(ctx, k); err == nil && u.Result != nil {
					_, _ = tw.db.EndAttempt(ctx, k, "")
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}
	})
	h := tw.next()
	if h.id != "h1" {
		t.Fatalf("started %s %s, want the harness run h1", h.kind, h.id)
	}
	a := tw.next()
	if a.kind != kindAttempt || a.id != k.String() {
		t.Fatalf("started %s %s, want the harness's attempt %s", a.kind, a.id, k)
	}
	close(a.finish)
	awaitEnd(t, h)
	if h.cause != nil {
		t.Fatalf("the harness run was stopped (%v) rather than given its attempt's result", h.cause)
	}
}

// A stop request (run.cancel through a gateway, or a harness stopping its
// attempt) stops what the worker drives with the cause the gateway would
// have used; a run asked to stop while it waited starts stopped. A
// cancelled run is not queued again.
func TestStopRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openStore(t)
	k := attemptElsewhere(t, db, "h0")
	queue(t, db, store.KindRun, "r1")
	queue(t, db, store.KindRun, "r2")
	if ok, err := db.RequestStop(ctx, "r2", store.StopCancel); err != nil || !ok {
		t.Fatalf("stop the waiting run: %v, %v", ok, err)
	}

	tw := startWorker(t, db, 3, time.Hour, nil)
	got := tw.nextN(3)
	a, r1, r2 := got[k.String()], got["r1"], got["r2"]
	if a == nil || r1 == nil || r2 == nil {
		t.Fatalf("with three slots the worker started %v, want the attempt, r1 and r2", ids(got))
	}
	if r2.ctx.Err() == nil || !errors.Is(context.Cause(r2.ctx), supervisor.CancelledByClient) {
		t.Fatalf("a run cancelled while it waited started with cause %v, want it cancelled at once", context.Cause(r2.ctx))
	}
	if r1.ctx.Err() != nil || a.ctx.Err() != nil {
		t.Fatalf("runs nobody asked to stop started stopped: %v, %v", context.Cause(r1.ctx), context.Cause(a.ctx))
	}

	if ok, err := db.RequestStop(ctx, "r1", store.StopCancel); err != nil || !ok {
		t.Fatalf("stop r1: %v, %v", ok, err)
	}
	if cause := awaitStop(t, r1); !errors.Is(cause, supervisor.CancelledByClient) {
		t.Fatalf("r1 stopped with %v, want %v", cause, supervisor.CancelledByClient)
	}
	if ok, err := db.StopAttempt(ctx, k, store.StopInterrupt); err != nil || !ok {
		t.Fatalf("stop the attempt: %v, %v", ok, err)
	}
	var stop *supervisor.Stop
	if cause := awaitStop(t, a); !errors.As(cause, &stop) || stop.Reason != event.ReasonInterrupted {
		t.Fatalf("the attempt stopped with %v, want an interrupt", cause)
	}

	awaitEnd(t, r1)
	tw.stop()
	for _, id := range []string{"r1", "r2"} {
		if r, err := db.GetRun(ctx, id); err != nil || r.Queue == event.StatusWaiting {
			t.Fatalf("run %s, cancelled, was queued again: %+v, %v", id, r, err)
		}
	}
}

// A worker that stops interrupts its runs, waits for them, and puts them
// back in the queue, where another worker takes them.
func TestStoppedWorkerRequeuesItsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openStore(t)
	queue(t, db, store.KindRun, "r1")

	first := startWorker(t, db, 1, time.Hour, nil)
	x := first.next()
	first.stop()
	select {
	case <-x.ended:
	default:
		t.Fatal("the worker returned before the run it drove ended")
	}
	var stop *supervisor.Stop
	if cause := context.Cause(x.ctx); !errors.As(cause, &stop) || stop.Reason != event.ReasonInterrupted {
		t.Fatalf("the stopping worker stopped its run with %v, want an interrupt", cause)
	}
	r, err := db.GetRun(ctx, "r1")
	if err != nil || r.Queue != event.StatusWaiting || r.LeaseOwner != "" {
		t.Fatalf("once its worker stopped, run r1 is %+v (%v), want it queued with no lease", r, err)
	}

	second := startWorker(t, db, 1, time.Hour, nil)
	if y := second.next(); y.id != "r1" {
		t.Fatalf("another worker started %s %s, want r1", y.kind, y.id)
	}
}

// A claim that fails (the store is broken for a while) is logged, and the
// worker goes on: once the store works again it claims the queued run.
func TestClaimFailureIsLoggedAndRetried(t *testing.T) {
	t.Parallel()
	db, path := openStore(t)
	raw, err := sql.Open("sqlite3", path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rename := func(from, to string) {
		t.Helper()
		if _, err := raw.Exec(`ALTER TABLE ` + from + ` RENAME TO ` + to); err != nil {
			t.Fatal(err)
		}
	}
	rename("attempt_queue", "attempt_queue_away")

	tw := startWorker(t, db, 1, 20*time.Millisecond, nil)
	deadline := time.After(patience)
	for logged := false; !logged; {
		select {
		case rec := <-tw.logs:
			rec.Attrs(func(a slog.Attr) bool {
				if a.Key == "err" && strings.Contains(a.Value.String(), "attempt_queue") {
					logged = rec.Level == slog.LevelError && rec.Message == "claim a phase attempt"
				}
				return !logged
			})
		case err := <-tw.done:
			t.Fatalf("the worker returned (%v) when a claim failed", err)
		case <-deadline:
			t.Fatalf("no failed claim was logged within %s", patience)
		}
	}

	queue(t, db, store.KindRun, "r1")
	rename("attempt_queue_away", "attempt_queue")
	if x := tw.next(); x.id != "r1" {
		t.Fatalf("once the store worked again the worker started %s %s, want r1", x.kind, x.id)
	}
}

// A worker that dies between recording its run's run.waiting and queueing
// the run leaves it claimed: once the wait is answered, another worker
// finds the run (Wakeable), queues it and continues it.
func TestWorkerRequeuesAStrandedWaitingRun(t *testing.T) {
	t.Parallel()
	db, _ := openStore(t)
	ctx := context.Background()
	queue(t, db, store.KindRun, "r1")
	if c, err := db.ClaimRun(ctx, "gone-host/1/x", time.Millisecond, ""); err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	j, err := db.SessionJournal(ctx, "s-r1")
	if err != nil {
		t.Fatal(err)
	}
	w := event.New(event.RunWaiting, event.RunWaitingData{WaitID: "w1", Kind: event.WaitApproval,
		Until: time.Now().Add(time.Hour).UTC().Format(time.RFC3339), OnTimeout: event.OnTimeoutDeny, CallID: "c1", Tool: "bash"})
	w.RunID = "r1"
	if _, err := j.Append(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ResolveWait(ctx, "r1", "w1", event.WaitResolvedData{Outcome: event.WaitAllowed, Via: event.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	tw := startWorker(t, db, 1, 20*time.Millisecond, nil)
	x := tw.next()
	if x.id != "r1" || !x.drive.Resume {
		t.Fatalf("the worker started %s %s (resume %v), want r1 resumed", x.kind, x.id, x.drive.Resume)
	}
	close(x.finish)
	awaitEnd(t, x)
}
