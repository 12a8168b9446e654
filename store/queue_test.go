package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"agent/event"
)

// queueRun inserts a run waiting for a worker in a session.
func queueRun(t *testing.T, db *DB, sessionID, runID string) {
	t.Helper()
	r := &Run{ID: runID, SessionID: sessionID, Prompt: "do it", Queue: event.StatusWaiting}
	if err := db.CreateRun(context.Background(), r, "", 0); err != nil {
		t.Fatal(err)
	}
}

// openClocked opens a test store whose clock the test moves.
func openClocked(t *testing.T) (*DB, *time.Time) {
	db := openTest(t)
	clock := time.Now().UTC()
	db.Now = func() time.Time { return clock }
	return db, &clock
}

// claim claims a run for owner and returns its id, "" for none.
func claim(t *testing.T, db *DB, owner string) (string, *Claim) {
	t.Helper()
	c, err := db.ClaimRun(context.Background(), owner, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		return "", nil
	}
	return c.Run.ID, c
}

// Workers get queued runs oldest first, one run of a session at a time.
func TestClaimRunOrderAndSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := openClocked(t)
	createSession(t, db, "s1")
	createSession(t, db, "s2")
	for _, r := range [][2]string{{"s1", "a1"}, {"s1", "a2"}, {"s2", "b1"}} {
		queueRun(t, db, r[0], r[1])
		*clock = clock.Add(time.Millisecond)
	}
	if n, err := db.QueueDepth(ctx); err != nil || n != 3 {
		t.Fatalf("queue depth %d (%v), want 3", n, err)
	}
	if id, _ := claim(t, db, "w1/1/x"); id != "a1" {
		t.Fatalf("first claim got %q, want the oldest, a1", id)
	}
	// a2 waits for a1: one run of a session is driven at a time.
	if id, _ := claim(t, db, "w2/2/x"); id != "b1" {
		t.Fatalf("second claim got %q, want b1 (a2's session is busy)", id)
	}
	if id, _ := claim(t, db, "w2/2/x"); id != "" {
		t.Fatalf("third claim got %q, want nothing", id)
	}
	if err := db.ReleaseLease(ctx, "a1", "w1/1/x"); err != nil {
		t.Fatal(err)
	}
	if id, c := claim(t, db, "w2/2/x"); id != "a2" || c.Resume || c.TakenOver {
		t.Fatalf("after a1 ended, claim got %q %+v, want a2 fresh", id, c)
	}
}

// A run queued for later (a rate limit's resume_after) is not claimed
// before then.
func TestQueueRunAtWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := openClocked(t)
	createSession(t, db, "s1")
	createSessionRun(t, db, "s1", "r1")
	if err := db.QueueRunAt(ctx, "r1", clock.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if id, _ := claim(t, db, "w/1/x"); id != "" {
		t.Fatalf("claimed %q a minute early", id)
	}
	*clock = clock.Add(time.Minute)
	if id, _ := claim(t, db, "w/1/x"); id != "r1" {
		t.Fatalf("claim at resume time got %q, want r1", id)
	}
}

// A run whose worker's lease expired is taken over, counted, and resumed;
// the stale worker can no longer ask for stops of it.
func TestClaimRunTakesOverExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := openClocked(t)
	db.OwnerDead = func(string) bool { return false } // another machine's
	createSession(t, db, "s1")
	queueRun(t, db, "s1", "r1")
	if id, _ := claim(t, db, "far/1/x"); id != "r1" {
		t.Fatalf("claim got %q", id)
	}
	if id, _ := claim(t, db, "near/2/y"); id != "" {
		t.Fatalf("a live lease was taken over: %q", id)
	}
	*clock = clock.Add(2 * time.Minute)
	id, c := claim(t, db, "near/2/y")
	if id != "r1" || !c.TakenOver || !c.Resume || c.Run.Reclaims != 1 {
		t.Fatalf("after expiry claim got %q %+v, want r1 taken over once", id, c)
	}
	if ok, err := db.RequestStop(ctx, "r1", StopCancel); err != nil || !ok {
		t.Fatalf("stop request: %v %v", ok, err)
	}
	if reqs, _ := db.StopRequests(ctx, "far/1/x"); len(reqs) != 0 {
		t.Errorf("the stale worker sees stop requests %v", reqs)
	}
	if reqs, _ := db.StopRequests(ctx, "near/2/y"); reqs["r1"] != StopCancel {
		t.Errorf("the holder sees stop requests %v, want r1 cancel", reqs)
	}
}

// ClaimQueuedRun takes one waiting run even while another run of its
// session is driven (a gateway ending it at once), and nothing a worker
// already took or nobody queued.
func TestClaimQueuedRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := openClocked(t)
	createSession(t, db, "s1")
	queueRun(t, db, "s1", "a1")
	*clock = clock.Add(time.Millisecond)
	queueRun(t, db, "s1", "a2")
	createSessionRun(t, db, "s1", "local")
	if id, _ := claim(t, db, "w/1/x"); id != "a1" {
		t.Fatalf("worker claimed %q, want a1", id)
	}
	c, err := db.ClaimQueuedRun(ctx, "a2", "gw/2/x", time.Minute)
	if err != nil || c == nil || c.Run.ID != "a2" || c.Run.LeaseOwner != "gw/2/x" || c.Resume {
		t.Fatalf("claim a2 behind a1: %+v %v", c, err)
	}
	for _, id := range []string{"a1", "a2", "local"} {
		if c, err := db.ClaimQueuedRun(ctx, id, "gw/3/x", time.Minute); err != nil || c != nil {
			t.Errorf("claimed %s, which no worker may claim: %+v %v", id, c, err)
		}
	}
}

// A worker whose run went back to the queue (its lease owner is NULL:
// Requeue, a release) is fenced out as surely as one whose lease another
// worker took: its events, intents and attempts are refused, and nothing
// of them is stored.
func TestFenceRefusesARunNobodyHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "s1")
	queueRun(t, db, "s1", "r1")
	if id, _ := claim(t, db, "w/1/x"); id != "r1" {
		t.Fatalf("claim got %q", id)
	}
	j, err := db.SessionJournal(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	j.Fence("w/1/x")
	j.Unshown(0)
	if _, err := j.Append(ctx, withRunID(userMsg("go", 0), "r1")); err != nil {
		t.Fatalf("the holder's event: %v", err)
	}
	if err := db.Requeue(ctx, "r1", "w/1/x"); err != nil {
		t.Fatal(err)
	}

	if _, err := j.Append(ctx, withRunID(assistantMsg("stale", 0), "r1")); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("an event after the run was requeued: err = %v, want ErrLeaseLost", err)
	}
	if _, err := db.BeginEffect(ctx, Receipt{Key: "k1", RunID: "r1", Tool: "send_email", LeaseOwner: "w/1/x"}, false); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("an intent after the run was requeued: err = %v, want ErrLeaseLost", err)
	}
	u := AttemptUnit{AttemptKey: AttemptKey{RunID: "r1", PhaseID: "build", Attempt: 1}, SessionID: "s1", Spec: json.RawMessage(`{}`)}
	if err := db.QueueAttempt(ctx, u, "w/1/x"); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("an attempt queued after the run was requeued: err = %v, want ErrLeaseLost", err)
	}
	evs, err := db.ListSessionEvents(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != event.MessageCompleted {
		t.Errorf("stored %d events, want only the holder's one", len(evs))
	}
	if _, err := db.ReceiptByKey(ctx, "k1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the stale intent was stored: %v", err)
	}
}

// patience bounds a wait for something that should happen at once.
const patience = 30 * time.Second

// A worker that looks for work and finds none takes no write lock: on
// PostgreSQL every writer waits for every other, and idle workers look at
// every poll and whenever a slot frees. Here another process holds the
// write lock while claims find nothing, then a run is queued and claimed.
func TestIdleClaimTakesNoWriteLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	other, err := Open(db.location)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	createSession(t, db, "s1")

	held, err := other.rw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	looked := make(chan error, 1)
	go func() {
		c, err := db.ClaimRun(ctx, "w/1/x", time.Minute, "")
		if err == nil && c != nil {
			err = errors.New("claimed run " + c.Run.ID)
		}
		if err == nil {
			var u *AttemptUnit
			if u, err = db.ClaimAttempt(ctx, "w/1/x", time.Minute); err == nil && u != nil {
				err = errors.New("claimed attempt " + u.String())
			}
		}
		looked <- err
	}()
	select {
	case err := <-looked:
		if err != nil {
			t.Fatalf("claims with nothing queued: %v", err)
		}
	case <-time.After(patience):
		t.Fatalf("claims with nothing queued waited %s for another process's write lock", patience)
	}
	if err := held.Rollback(); err != nil {
		t.Fatal(err)
	}

	queueRun(t, db, "s1", "r1")
	if id, _ := claim(t, db, "w/1/x"); id != "r1" {
		t.Fatalf("claim after r1 was queued got %q, want r1", id)
	}
}
