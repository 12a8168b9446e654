package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"agent/event"
)

// harnessRun inserts a harness run of session s1 leased to owner, with a
// phase attempt started, and returns the attempt's key.
func harnessRun(t *testing.T, db *DB, owner string) AttemptKey {
	t.Helper()
	ctx := context.Background()
	createSession(t, db, "s1")
	r := &Run{ID: "h1", Kind: KindHarness, SessionID: "s1", Prompt: "do it"}
	if err := db.CreateRun(ctx, r, owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	return AttemptKey{RunID: "h1", PhaseID: "build", Attempt: 1}
}

func queueUnit(t *testing.T, db *DB, k AttemptKey, owner string) {
	t.Helper()
	u := AttemptUnit{AttemptKey: k, SessionID: "s1", Spec: json.RawMessage(`{"spec":{}}`)}
	if err := db.QueueAttempt(context.Background(), u, owner); err != nil {
		t.Fatal(err)
	}
}

func claimUnit(t *testing.T, db *DB, owner string) *AttemptUnit {
	t.Helper()
	u, err := db.ClaimAttempt(context.Background(), owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Only the harness's driver queues its attempts; one worker claims each,
// and while it holds it, it writes the attempt's events and intents and
// leaves its result, which the harness reads.
func TestAttemptQueueClaimWriteFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	k := harnessRun(t, db, "h/1/x")
	u := AttemptUnit{AttemptKey: k, SessionID: "s1", Spec: json.RawMessage(`{"spec":{}}`)}
	if err := db.QueueAttempt(ctx, u, "w/2/x"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a process not driving the harness queued its attempt: %v", err)
	}
	queueUnit(t, db, k, "h/1/x")
	got := claimUnit(t, db, "w/2/x")
	if got == nil || got.AttemptKey != k || got.State != event.StatusClaimed || got.Holder != "w/2/x" || string(got.Spec) != `{"spec":{}}` {
		t.Fatalf("claimed %+v", got)
	}
	if again := claimUnit(t, db, "w/3/x"); again != nil {
		t.Fatalf("an attempt was claimed twice: %+v", again)
	}

	j, err := db.SessionJournal(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	j.FenceAttempt("w/2/x", k)
	j.Unshown(0)
	if _, err := j.Append(ctx, withRunID(userMsg("go", 0), "h1")); err != nil {
		t.Fatalf("the holder's event: %v", err)
	}
	if _, err := db.BeginEffect(ctx, Receipt{Key: "k1", RunID: "h1", PhaseID: "build", Attempt: 1, Tool: "send_email",
		LeaseOwner: "w/2/x", AttemptLease: true}, false); err != nil {
		t.Fatalf("the holder's intent: %v", err)
	}
	if _, err := db.BeginEffect(ctx, Receipt{Key: "k2", RunID: "h1", PhaseID: "build", Attempt: 1, Tool: "send_email",
		LeaseOwner: "w/3/x", AttemptLease: true}, false); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("another worker's intent for the attempt: %v", err)
	}
	if err := db.RenewAttempt(ctx, k, "w/2/x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := db.FinishAttempt(ctx, k, "w/3/x", json.RawMessage(`{"status":"completed"}`)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("another worker left a result: %v", err)
	}
	if err := db.FinishAttempt(ctx, k, "w/2/x", json.RawMessage(`{"status":"completed"}`)); err != nil {
		t.Fatal(err)
	}
	done, err := db.GetAttemptUnit(ctx, k)
	if err != nil || done.State != event.StatusDone || string(done.Result) != `{"status":"completed"}` {
		t.Fatalf("the harness reads %+v (%v)", done, err)
	}
	// Finished, the attempt is no longer the worker's to write for.
	if _, err := j.Append(ctx, withRunID(userMsg("late", 0), "h1")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("an event after the result: %v", err)
	}
	if taken, err := db.EndAttempt(ctx, k, ""); err != nil || !taken {
		t.Fatalf("end: %v %v", taken, err)
	}
	if _, err := db.GetAttemptUnit(ctx, k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after its end: %v", err)
	}
}

// A harness that takes an attempt back (its worker is gone), or that
// starts again after a crash, fences the attempt's worker out: no event,
// intent, renewal or result of it counts any more.
func TestAttemptQueueTakeBackFences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, how := range []string{"taken back", "harness restarted"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			db := openTest(t)
			k := harnessRun(t, db, "h/1/x")
			queueUnit(t, db, k, "h/1/x")
			if claimUnit(t, db, "w/2/x") == nil {
				t.Fatal("nothing to claim")
			}
			j, err := db.SessionJournal(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			j.FenceAttempt("w/2/x", k)
			j.Unshown(0)
			if how == "taken back" {
				if taken, err := db.EndAttempt(ctx, k, "w/9/x"); err != nil || taken {
					t.Fatalf("taken back from a worker that does not hold it: %v %v", taken, err)
				}
				if taken, err := db.EndAttempt(ctx, k, "w/2/x"); err != nil || !taken {
					t.Fatalf("take back: %v %v", taken, err)
				}
			} else if _, err := db.InterruptAttempts(ctx, "h1"); err != nil {
				t.Fatal(err)
			}
			if _, err := j.Append(ctx, withRunID(userMsg("late", 0), "h1")); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("event: %v", err)
			}
			if _, err := db.BeginEffect(ctx, Receipt{Key: "k1", RunID: "h1", PhaseID: "build", Attempt: 1,
				LeaseOwner: "w/2/x", AttemptLease: true}, false); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("intent: %v", err)
			}
			if err := db.RenewAttempt(ctx, k, "w/2/x", time.Minute); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("renew: %v", err)
			}
			if err := db.FinishAttempt(ctx, k, "w/2/x", json.RawMessage(`{}`)); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("result: %v", err)
			}
		})
	}
}

// An attempt is claimed only while its harness is driven: one whose
// driver died waits for the harness to start again.
func TestAttemptQueueWaitsForALiveHarness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := openClocked(t)
	k := harnessRun(t, db, "h/1/x")
	queueUnit(t, db, k, "h/1/x")
	*clock = clock.Add(2 * time.Minute) // the harness's lease expired
	if u := claimUnit(t, db, "w/2/x"); u != nil {
		t.Fatalf("claimed an attempt of a harness nobody drives: %+v", u)
	}
	if err := db.AcquireLease(ctx, "h1", "h/3/x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if u := claimUnit(t, db, "w/2/x"); u == nil || u.AttemptKey != k {
		t.Fatalf("after the harness was taken over: %+v", u)
	}
	// Its worker's hold expires like a lease.
	u, err := db.GetAttemptUnit(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if db.UnitAbandoned(u) {
		t.Fatal("abandoned while its hold is live")
	}
	*clock = clock.Add(2 * time.Minute)
	if !db.UnitAbandoned(u) {
		t.Fatal("not abandoned after its hold expired")
	}
}

// Stopping an attempt no worker claimed deletes it; a claimed one gets a
// stop request its worker reads.
func TestAttemptQueueStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	k := harnessRun(t, db, "h/1/x")
	queueUnit(t, db, k, "h/1/x")
	if running, err := db.StopAttempt(ctx, k, StopInterrupt); err != nil || running {
		t.Fatalf("stop a waiting attempt: running=%v %v", running, err)
	}
	if u := claimUnit(t, db, "w/2/x"); u != nil {
		t.Fatalf("claimed a stopped attempt: %+v", u)
	}
	queueUnit(t, db, k, "h/1/x")
	claimUnit(t, db, "w/2/x")
	if reqs, err := db.AttemptStopRequests(ctx, "w/2/x"); err != nil || len(reqs) != 0 {
		t.Fatalf("stop requests before any: %v %v", reqs, err)
	}
	if running, err := db.StopAttempt(ctx, k, StopInterrupt); err != nil || !running {
		t.Fatalf("stop a claimed attempt: running=%v %v", running, err)
	}
	reqs, err := db.AttemptStopRequests(ctx, "w/2/x")
	if err != nil || reqs[k] != StopInterrupt || len(reqs) != 1 {
		t.Fatalf("stop requests: %v %v", reqs, err)
	}
}

// ClaimRun by kind: a worker with no free child slot still takes a harness
// run, and the reverse.
func TestClaimRunByKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := openClocked(t)
	createSession(t, db, "s1")
	createSession(t, db, "s2")
	if err := db.CreateRun(ctx, &Run{ID: "h1", Kind: KindHarness, SessionID: "s1", Prompt: "p", Queue: event.StatusWaiting}, "", 0); err != nil {
		t.Fatal(err)
	}
	*clock = clock.Add(time.Millisecond)
	queueRun(t, db, "s2", "r1")
	c, err := db.ClaimRun(ctx, "w/1/x", time.Minute, KindRun)
	if err != nil || c == nil || c.Run.ID != "r1" {
		t.Fatalf("claim a single run: %+v %v", c, err)
	}
	if c, err := db.ClaimRun(ctx, "w/1/x", time.Minute, KindRun); err != nil || c != nil {
		t.Fatalf("claimed a harness run as a single run: %+v %v", c, err)
	}
	if c, err := db.ClaimRun(ctx, "w/1/x", time.Minute, KindHarness); err != nil || c == nil || c.Run.ID != "h1" {
		t.Fatalf("claim a harness run: %+v %v", c, err)
	}
}

// Several unshown journals share one session's sequence: a harness and
// the workers running its attempts write in turn, deltas included, and
// the session's seqs stay 1..n with none taken twice.
func TestJournalUnshownWritersShareASequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	sid := createSession(t, db, "s1").ID
	createSessionRun(t, db, sid, "run-1")
	var js []*Journal
	for range 3 {
		j, err := db.SessionJournal(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		j.Unshown(time.Hour)
		js = append(js, j)
	}
	delta := withRunID(event.New(event.MessageDelta, event.MessageDeltaData{Text: "x"}), "run-1")
	want := 0
	for round := range 4 {
		for i, j := range js {
			if (round+i)%2 == 0 {
				if _, err := j.Append(ctx, delta); err != nil {
					t.Fatal(err)
				}
				want++
			}
			got, err := j.Append(ctx, withRunID(userMsg("m", 0), "run-1"))
			if err != nil {
				t.Fatalf("round %d, writer %d: %v", round, i, err)
			}
			want++
			if got.Seq != int64(want) {
				t.Fatalf("round %d, writer %d: Append returned seq %d, want %d", round, i, got.Seq, want)
			}
		}
	}
	for _, j := range js {
		if err := j.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := db.ListSessionEvents(ctx, sid, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != want {
		t.Fatalf("%d events stored, want %d", len(evs), want)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}
