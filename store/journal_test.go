package store

import (
	"context"
	"sync"
	"testing"

	"agent/event"
)

func TestJournalBuffersDeltas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	appendSeq(t, db, "run-1", event.New(event.RunStarted, nil)) // the journal continues after it

	j, err := db.Journal(ctx, "run-1", "sess-1")
	if err != nil {
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
	if evs, _ := db.ListEvents(ctx, "run-1", 1, 0); len(evs) != 0 {
		t.Fatalf("deltas were written before a meaningful event: %+v", evs)
	}

	if _, err := j.Append(ctx, assistantMsg("Hello!", 0)); err != nil {
		t.Fatal(err)
	}
	assertSeqs(t, db, "run-1", []string{
		event.RunStarted, event.MessageDelta, event.MessageDelta, event.MessageDelta, event.MessageCompleted,
	})

	// Flush writes a trailing delta; a new journal continues after it.
	if _, err := j.Append(ctx, event.New(event.MessageDelta, event.MessageDeltaData{Text: "tail"})); err != nil {
		t.Fatal(err)
	}
	if err := j.Flush(ctx); err != nil {
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

// BenchmarkJournalAppend measures one durable (fsynced) event.
func BenchmarkJournalAppend(b *testing.B) {
	ctx := context.Background()
	db, err := Open(b.TempDir() + "/agent.db")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.CreateRun(ctx, &Run{ID: "run-1"}, "", 0); err != nil {
		b.Fatal(err)
	}
	j, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := j.Append(ctx, event.New(event.Heartbeat, nil)); err != nil {
			b.Fatal(err)
		}
	}
}

// Lazy types wait, like deltas, and are written in order with the next
// durable event.
func TestJournalLazyTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	j, err := db.Journal(ctx, "run-1", "")
	if err != nil {
		t.Fatal(err)
	}
	j.SetLazy(event.MessageCompleted)
	if _, err := j.Append(ctx, userMsg("hi", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, assistantMsg("calling", 0, event.ToolCall{ID: "c1", Name: "bash"})); err != nil {
		t.Fatal(err)
	}
	if evs, _ := db.ListEvents(ctx, "run-1", 0, 0); len(evs) != 0 {
		t.Fatalf("lazy events written at once: %d", len(evs))
	}
	if _, err := j.Append(ctx, toolStarted("c1", "bash", `{}`)); err != nil {
		t.Fatal(err)
	}
	assertSeqs(t, db, "run-1", []string{event.MessageCompleted, event.MessageCompleted, event.ToolStarted})
	if conv, err := db.Conversation(ctx, "run-1"); err != nil || len(conv) != 2 {
		t.Errorf("conversation after the flush = %+v, %v", conv, err)
	}
}
