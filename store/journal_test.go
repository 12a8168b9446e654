package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"agent/event"
	"agent/store/pgtest"
)

func TestJournalBuffersDeltas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	j, err := db.Journal(ctx, "run-1", "sess-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, event.New(event.RunStarted, nil)); err != nil {
		t.Fatal(err)
	}
	for i, text := range []string{"Hel", "lo", "!"} {
		e, err := j.Append(ctx, event.New(event.MessageDelta, event.MessageDeltaData{Text: text}))
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != int64(2+i) || e.RunID != "run-1" || e.SessionID != "sess-1" {
			t.Errorf("delta %d = seq %d run %q session %q", i, e.Seq, e.RunID, e.SessionID)
		}
	}
	// The first delta is written, reserving seqs for the reply's next
	// ones, which wait for the next meaningful event.
	if evs, _ := db.ListEvents(ctx, "run-1", 1, 0); len(evs) != 1 {
		t.Fatalf("%d deltas were written before a meaningful event, want the first alone", len(evs))
	}

	if _, err := j.Append(ctx, assistantMsg("Hello!", 0)); err != nil {
		t.Fatal(err)
	}
	assertSeqs(t, db, "run-1", []string{
		event.RunStarted, event.MessageDelta, event.MessageDelta, event.MessageDelta, event.MessageCompleted,
	})

	// Close writes a trailing delta and gives back the reserved seqs: a
	// new journal continues right after it.
	if _, err := j.Append(ctx, event.New(event.MessageDelta, event.MessageDeltaData{Text: "tail"})); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	j2, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}
	e, err := j2.Append(ctx, event.New(event.Heartbeat, nil))
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 7 {
		t.Errorf("new journal's first seq = %d, want 7", e.Seq)
	}

	if _, err := j.Append(ctx, event.Event{RunID: "other", Type: event.Heartbeat}); err == nil {
		t.Error("journal accepted an event of another run")
	}
}

func TestJournalConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	j, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}

	const workers, each = 4, 25
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				typ := event.Heartbeat
				if i%3 == 0 {
					typ = event.MessageDelta
				}
				if _, err := j.Append(ctx, event.New(typ, nil)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := db.ListEvents(ctx, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != workers*each {
		t.Fatalf("stored %d events, want %d", len(evs), workers*each)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}

// assertSeqs checks the run's events have these types and seqs 1, 2, 3….
func assertSeqs(t *testing.T, db *DB, runID string, types []string) {
	t.Helper()
	evs, err := db.ListEvents(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != len(types) {
		t.Fatalf("events = %d, want %d", len(evs), len(types))
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.Type != types[i] {
			t.Errorf("event %d = seq %d %s, want seq %d %s", i, e.Seq, e.Type, i+1, types[i])
		}
	}
}

// BenchmarkJournalAppend measures one persisted event: on SQLite
// fsynced; on PostgreSQL (pgtest's server runs with fsync off) the round
// trips, the write lock and the transaction.
func BenchmarkJournalAppend(b *testing.B) {
	// PostgreSQL as tests run it (no fsync) and as production runs it;
	// "worker" is how `agent worker` writes: a session's journal, fenced
	// by the run's lease, its seqs taken in each write's transaction.
	for _, store := range []struct {
		name     string
		location func(b *testing.B) string
		worker   bool
	}{
		{"sqlite", func(b *testing.B) string { return b.TempDir() + "/agent.db" }, false},
		{"postgres-nofsync", func(b *testing.B) string { return pgtest.Database(b, pgtest.Start(b), "") }, false},
		{"postgres-fsync", func(b *testing.B) string { return pgtest.Database(b, pgtest.StartDurable(b), "") }, false},
		{"postgres-fsync-worker", func(b *testing.B) string { return pgtest.Database(b, pgtest.StartDurable(b), "") }, true},
	} {
		b.Run(store.name, func(b *testing.B) {
			db, err := Open(store.location(b))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			benchmarkAppend(b, db, store.worker)
		})
	}
}

func benchmarkAppend(b *testing.B, db *DB, worker bool) {
	ctx := context.Background()
	r, owner, ttl := &Run{ID: "run-1"}, "", time.Duration(0)
	if worker {
		if err := db.CreateSession(ctx, &Session{ID: "s1"}); err != nil {
			b.Fatal(err)
		}
		r.SessionID, owner, ttl = "s1", "w/1/x", time.Hour
	}
	if err := db.CreateRun(ctx, r, owner, ttl); err != nil {
		b.Fatal(err)
	}
	j, err := db.Journal(ctx, "run-1", "")
	if worker {
		if j, err = db.SessionJournal(ctx, "s1"); err == nil {
			j.Fence(owner)
			j.Unshown(200 * time.Millisecond)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		e := event.New(event.Heartbeat, nil)
		e.RunID = "run-1"
		if _, err := j.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
}

// Every event but a delta is in the store when Append returns, so what a
// front-end shows was persisted first. A crash loses the deltas not yet
// written, and their seqs are never handed out again.
func TestJournalNeverReusesASeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	j, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []event.Event{
		userMsg("hi", 0), assistantMsg("calling", 0, event.ToolCall{ID: "c1", Name: "write_file"}),
		event.New(event.ArtifactCreated, event.ArtifactData{Path: "a.md", SHA256: "x", Bytes: 1}),
	} {
		got, err := j.Append(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if evs, _ := db.ListEvents(ctx, "run-1", got.Seq-1, 0); len(evs) != 1 || evs[0].Type != e.Type {
			t.Fatalf("%s (seq %d) was returned before it was written: %v", e.Type, got.Seq, evs)
		}
	}
	var last int64
	for range 3 {
		d, err := j.Append(ctx, event.New(event.MessageDelta, event.MessageDeltaData{Text: "x"}))
		if err != nil {
			t.Fatal(err)
		}
		last = d.Seq
	}
	// kill -9 now: the deltas are lost with the process. The next
	// process's journal continues above every seq handed out.
	j2, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}
	next, err := j2.Append(ctx, userMsg("resumed", 0))
	if err != nil {
		t.Fatal(err)
	}
	if next.Seq <= last {
		t.Errorf("after the crash the next event got seq %d, a delta already had %d", next.Seq, last)
	}

	// Deltas past the reservation are written, which reserves more.
	sid := createSession(t, db, "s1").ID
	createSessionRun(t, db, sid, "run-2")
	sj, err := db.SessionJournal(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sj.Append(ctx, withRunID(userMsg("go", 0), "run-2")); err != nil {
		t.Fatal(err)
	}
	for range reserveAhead + 10 {
		d, err := sj.Append(ctx, withRunID(event.New(event.MessageDelta, event.MessageDeltaData{Text: "y"}), "run-2"))
		if err != nil {
			t.Fatal(err)
		}
		last = d.Seq
	}
	stored, _ := db.ListSessionEvents(ctx, sid, 0, 0)
	if len(stored) < reserveAhead {
		t.Errorf("%d deltas past the reservation stayed in memory only", reserveAhead+10-(len(stored)-1))
	}
	sj2, err := db.SessionJournal(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if next, err := sj2.Append(ctx, withRunID(userMsg("again", 0), "run-2")); err != nil || next.Seq <= last {
		t.Errorf("a new session journal gave seq %d (%v); a delta already had %d", next.Seq, err, last)
	}
}

func withRunID(e event.Event, runID string) event.Event {
	e.RunID = runID
	return e
}

// A worker's journal (Unshown) takes again the seqs a dead worker reserved
// but never stored, so the session's stream has no hole, and writes its
// deltas within the flush interval, so text streams through the store.
func TestJournalUnshownKeepsTheStreamGapless(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	sid := createSession(t, db, "s1").ID
	createSessionRun(t, db, sid, "run-1")
	delta := func(at time.Time) event.Event {
		e := withRunID(event.New(event.MessageDelta, event.MessageDeltaData{Text: "x"}), "run-1")
		e.TS = at
		return e
	}
	dead, err := db.SessionJournal(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	dead.Unshown(time.Second)
	if _, err := dead.Append(ctx, withRunID(userMsg("go", 0), "run-1")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 3 {
		if _, err := dead.Append(ctx, delta(start.Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	// kill -9: the three deltas die with the worker, unseen by anyone.

	taker, err := db.SessionJournal(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	taker.Unshown(time.Second)
	for i := range 3 {
		if _, err := taker.Append(ctx, delta(start.Add(time.Duration(i)*400*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	// The third delta came 800 ms after the first: not yet due.
	if evs, _ := db.ListSessionEvents(ctx, sid, 1, 0); len(evs) != 0 {
		t.Fatalf("deltas written before their flush interval: %d", len(evs))
	}
	if _, err := taker.Append(ctx, delta(start.Add(1200*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	if _, err := taker.Append(ctx, withRunID(assistantMsg("xxxx", 0), "run-1")); err != nil {
		t.Fatal(err)
	}
	evs, err := db.ListSessionEvents(ctx, sid, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d (%s) has seq %d: the stream has a hole", i, e.Type, e.Seq)
		}
	}
	if len(evs) != 6 {
		t.Fatalf("stored %d events, want 6", len(evs))
	}
}

// A delta waits at most the flush interval of an Unshown journal.
func TestJournalUnshownFlushesDeltas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	j, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}
	j.Unshown(100 * time.Millisecond)
	if _, err := j.Append(ctx, event.New(event.RunStarted, nil)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 5 {
		e := event.New(event.MessageDelta, event.MessageDeltaData{Text: "x"})
		e.TS = start.Add(time.Duration(i) * 60 * time.Millisecond)
		if _, err := j.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// Deltas at 0 and 60 ms wait; the one at 120 is 120 ms after the
	// first, so the three are written; those at 180 and 240 wait.
	evs, _ := db.ListEvents(ctx, "run-1", 0, 0)
	if len(evs) != 1+3 {
		t.Errorf("%d of 5 deltas stored; want the first three", len(evs)-1)
	}
}

// storedSeqs returns the events of a run (sessionID "") or a session as
// stored, failing the test unless their seqs are 1, 2, 3… with no gap.
func storedSeqs(t *testing.T, db *DB, runID, sessionID string) []event.Event {
	t.Helper()
	ctx := context.Background()
	var evs []event.Event
	var err error
	if sessionID != "" {
		evs, err = db.ListSessionEvents(ctx, sessionID, 0, 0)
	} else {
		evs, err = db.ListEvents(ctx, runID, 0, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("stored event %d (%s) has seq %d: a reader waiting for seq %d waits forever", i, e.Type, e.Seq, i+1)
		}
	}
	return evs
}

// isLost reports whether e is the delta stored for one lost in a crash.
func isLost(e event.Event) bool {
	var d struct {
		Text string `json:"text"`
		Lost bool   `json:"lost"`
	}
	return e.Type == event.MessageDelta && e.Decode(&d) == nil && d.Lost && d.Text == ""
}

// kill -9 mid-reply, then a new journal: the stored seqs have no gap,
// every seq a delta was shown with holds a delta (stored, or lost), and
// the next event comes right after. In a run's journal, a session's, and
// a worker's (unshown) continuing a shown journal's session.
func TestJournalGaplessAfterACrash(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		session bool
		unshown bool // the journal after the crash
	}{
		{"run", false, false},
		{"session", true, false},
		{"worker after a session's crash", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openTest(t)
			sid := ""
			if tt.session {
				sid = createSession(t, db, "s1").ID
				createSessionRun(t, db, sid, "run-1")
			} else {
				createRun(t, db, "run-1")
			}
			open := func() *Journal {
				t.Helper()
				j, err := db.Journal(ctx, "run-1", "")
				if tt.session {
					j, err = db.SessionJournal(ctx, sid)
				}
				if err != nil {
					t.Fatal(err)
				}
				return j
			}
			dead := open()
			for _, e := range []event.Event{event.New(event.RunStarted, nil), userMsg("go", 0)} {
				if _, err := dead.Append(ctx, withRunID(e, "run-1")); err != nil {
					t.Fatal(err)
				}
			}
			var shown []event.Event
			for range 3 {
				d, err := dead.Append(ctx, withRunID(event.New(event.MessageDelta, event.MessageDeltaData{Text: "x"}), "run-1"))
				if err != nil {
					t.Fatal(err)
				}
				shown = append(shown, d)
			}
			// kill -9: dead is never closed; its buffered deltas are lost.

			next := open()
			if tt.unshown {
				next.Unshown(time.Second)
			}
			got, err := next.Append(ctx, withRunID(assistantMsg("xxx", 0), "run-1"))
			if err != nil {
				t.Fatal(err)
			}
			evs := storedSeqs(t, db, "run-1", sid)
			if last := evs[len(evs)-1]; last.Seq != got.Seq || last.Type != event.MessageCompleted {
				t.Fatalf("the event after the crash got seq %d; the store ends with %s at %d", got.Seq, last.Type, last.Seq)
			}
			for _, d := range shown {
				if d.Seq > int64(len(evs)) {
					t.Errorf("seq %d was shown as a delta, and the store ends before it", d.Seq)
				} else if at := evs[d.Seq-1]; at.Type != event.MessageDelta {
					t.Errorf("seq %d was shown as a delta, then given to %s", d.Seq, at.Type)
				}
			}
			lost := 0
			for _, e := range evs {
				if isLost(e) {
					lost++
					if e.RunID != "run-1" {
						t.Errorf("lost delta %d names run %q", e.Seq, e.RunID)
					}
				}
			}
			if lost == 0 || lost > reserveAhead {
				t.Errorf("%d lost deltas stored, want between 1 and %d", lost, reserveAhead)
			}

			// A crash outside a reply (during a tool call) stores no
			// lost delta: nothing was reserved past the last event.
			if _, err := next.Append(ctx, withRunID(toolStarted("c1", "bash", `{}`), "run-1")); err != nil {
				t.Fatal(err)
			}
			after := open()
			if e, err := after.Append(ctx, withRunID(event.New(event.Heartbeat, nil), "run-1")); err != nil || e.Seq != got.Seq+2 {
				t.Errorf("after a crash outside a reply the next event got seq %d (%v), want %d", e.Seq, err, got.Seq+2)
			}
			if n := len(storedSeqs(t, db, "run-1", sid)); n != len(evs)+2 {
				t.Errorf("stored %d events, want %d: lost deltas where no delta was shown", n, len(evs)+2)
			}
		})
	}
}

// A write that failed (a full disk, a cancelled context) leaves no hole
// once writing works again: its event was shown to no one, so the next
// event takes its seq, after the deltas shown before it.
func TestJournalFailedWriteLeavesNoHole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	j, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, event.New(event.RunStarted, nil)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := j.Append(ctx, event.New(event.MessageDelta, event.MessageDeltaData{Text: "x"})); err != nil {
			t.Fatal(err)
		}
	}
	failed, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := j.Append(failed, assistantMsg("xx", 0)); err == nil {
		t.Fatal("a write with a cancelled context succeeded")
	}
	if _, err := j.Append(ctx, assistantMsg("xx", 0)); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}
	assertSeqs(t, db, "run-1", []string{event.RunStarted, event.MessageDelta, event.MessageDelta, event.MessageCompleted})
	// The next journal continues right after, with nothing to fill.
	j2, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := j2.Append(ctx, event.New(event.Heartbeat, nil)); err != nil || e.Seq != 5 {
		t.Errorf("the next journal's first event got seq %d (%v), want 5", e.Seq, err)
	}
}
