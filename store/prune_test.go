package store

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"agent/checkpoint"
	"agent/event"
)

// longOutput is a tool output well over PrunedOutput's length.
var longOutput = strings.Repeat("line of a long tool output\n", 40)

func delta(text string) event.Event {
	return event.New(event.MessageDelta, event.MessageDeltaData{Text: text})
}

// runTurns is a single run's conversation: a user message, a reply
// streamed as deltas that calls write_file (checkpointed), its output, a
// receipt and an artifact, and a final reply streamed too.
func runTurns(blob string) []event.Event {
	call := event.ToolCall{ID: "c1", Name: "write_file", Arguments: `{"path":"a.txt","content":"new"}`}
	return []event.Event{
		event.New(event.RunStarted, event.RunStartedData{Prompt: "do it"}),
		userMsg("do it", 0),
		delta("let "), delta("me "), delta("write"),
		assistantMsg("let me write", 0, call),
		toolStarted("c1", "write_file", call.Arguments),
		checkpointEvent("a.txt", blob, true),
		toolCompleted(event.ToolCompletedData{CallID: "c1", Name: "write_file", OK: true, Output: longOutput}),
		event.New(event.ArtifactCreated, event.ArtifactData{Path: "a.txt", SHA256: "ab", Bytes: 3}),
		event.New(event.ReceiptRecorded, event.ReceiptData{Type: "email_sent", Key: "key-" + blob}),
		delta("all "), delta("done"),
		assistantMsg("all done", 0),
	}
}

// runState is everything of a run prune may change or must keep.
type runState struct {
	Run         Run
	Events      []event.Event
	Messages    []Message
	ToolCalls   []ToolCall
	Checkpoints []Checkpoint
	Receipts    []Receipt
	Artifacts   []Artifact
}

func stateOf(t *testing.T, db *DB, runID string) runState {
	t.Helper()
	ctx := context.Background()
	var s runState
	r, err := db.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	s.Run = *r
	if s.Events, err = db.ListEvents(ctx, runID, 0, 0); err != nil {
		t.Fatal(err)
	}
	if s.Messages, err = db.Messages(ctx, runID); err != nil {
		t.Fatal(err)
	}
	if s.ToolCalls, err = db.ToolCalls(ctx, runID); err != nil {
		t.Fatal(err)
	}
	if s.Checkpoints, err = db.Checkpoints(ctx, runID); err != nil {
		t.Fatal(err)
	}
	if s.Receipts, err = db.Receipts(ctx, runID, ""); err != nil {
		t.Fatal(err)
	}
	if s.Artifacts, err = db.Artifacts(ctx, runID, ""); err != nil {
		t.Fatal(err)
	}
	return s
}

func finished(status string) event.Event {
	typ := map[string]string{
		event.StatusCompleted: event.RunCompleted, event.StatusFailed: event.RunFailed,
		event.StatusInterrupted: event.RunInterrupted, event.StatusCancelled: event.RunCancelled,
	}[status]
	return event.New(typ, event.RunFinishedData{Status: status, Result: "all done", Reason: status, ExitCode: 1})
}

// pruneFixture is a store with, 40 days before its clock's now: a
// completed run (old), a failed one (failed, resumable), an interrupted
// one (interrupted), and a completed run in session s1 (sess-run); and a
// completed run finished now (recent). Each has deltas, a tool output, a
// checkpoint, an artifact and a receipt.
type pruneFixture struct {
	db    *DB
	clock *fakeClock
	dir   string // AGENT_HOME
}

func newPruneFixture(t *testing.T) *pruneFixture {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := newClock()
	db.Now = clock.Now
	f := &pruneFixture{db: db, clock: clock, dir: dir}

	for _, r := range []struct{ id, status string }{
		{"old", event.StatusCompleted}, {"failed", event.StatusFailed}, {"interrupted", event.StatusInterrupted},
	} {
		clock.Advance(time.Minute)
		createRun(t, db, r.id)
		appendSeq(t, db, r.id, at(clock, append(runTurns(blobSum(r.id)), finished(r.status)))...)
	}
	createSession(t, db, "s1")
	createSessionRun(t, db, "s1", "sess-run")
	j := sessionJournal(t, db, "s1")
	sessionAppend(t, j, "sess-run", at(clock, append(runTurns(blobSum("sess-run")), finished(event.StatusCompleted)))...)
	if err := j.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	clock.Advance(40 * 24 * time.Hour)
	createRun(t, db, "recent")
	appendSeq(t, db, "recent", at(clock, append(runTurns(blobSum("recent")), finished(event.StatusCompleted)))...)
	return f
}

// at stamps events with the clock's time: a terminal event's time is when
// its run finished.
func at(clock *fakeClock, evs []event.Event) []event.Event {
	for i := range evs {
		evs[i].TS = clock.Now()
	}
	return evs
}

// blobSum is a fake sha256 naming a run's checkpoint blob.
func blobSum(runID string) string {
	return strings.Repeat("0", 64-len(runID)) + strings.Map(func(r rune) rune { return 'a' + r%6 }, runID)
}

func (f *pruneFixture) before() time.Time { return f.clock.Now().Add(-30 * 24 * time.Hour) }

func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPruneFixture(t)
	db := f.db
	ids := []string{"old", "failed", "interrupted", "sess-run", "recent"}
	was := map[string]runState{}
	for _, id := range ids {
		was[id] = stateOf(t, db, id)
	}
	sessionWas, err := db.ListSessionEvents(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	// A dry run reports and changes nothing.
	dry, err := db.Prune(ctx, PruneOptions{Before: f.before(), DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got := stateOf(t, db, id); !reflect.DeepEqual(got, was[id]) {
			t.Fatalf("dry run changed run %s", id)
		}
	}

	rep, err := db.Prune(ctx, PruneOptions{Before: f.before()})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, dry) {
		t.Errorf("dry run reported %+v, prune %+v", dry, rep)
	}
	// Three pruned runs, each with 5 deltas and one tool output; the tool
	// message only of the completed run outside a session.
	want := PruneReport{Runs: []string{"old", "failed", "sess-run"}, Deltas: 15, ToolOutputs: 3, ToolMessages: 1, Bytes: rep.Bytes}
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("report = %+v, want %+v", rep, want)
	}
	// Bytes: at least the text removed (delta data and 5 copies of the
	// output: 3 events, 3 tool_calls rows and 1 message, less the markers),
	// and not more than that plus each deleted row's other columns.
	text := 0
	for _, id := range []string{"old", "failed", "sess-run"} {
		for _, e := range was[id].Events {
			if e.Type == event.MessageDelta {
				text += len(e.Data)
			}
		}
	}
	outputs := 7 * (len(longOutput) + strings.Count(longOutput, "\n") - len(PrunedOutput)) // JSON escapes \n in events
	low, high := int64(text+outputs-4*strings.Count(longOutput, "\n")), int64(text+outputs+15*200)
	if rep.Bytes < low || rep.Bytes > high {
		t.Errorf("bytes = %d, want between %d and %d", rep.Bytes, low, high)
	}

	for _, id := range []string{"interrupted", "recent"} {
		if got := stateOf(t, db, id); !reflect.DeepEqual(got, was[id]) {
			t.Errorf("run %s changed:\n%+v\nwas\n%+v", id, got, was[id])
		}
	}
	for _, id := range []string{"old", "failed", "sess-run"} {
		got, old := stateOf(t, db, id), was[id]
		if got.Run.PrunedAt.IsZero() {
			t.Errorf("run %s: no pruned_at", id)
		}
		got.Run.PrunedAt = time.Time{}
		if !reflect.DeepEqual(got.Run, old.Run) || got.Run.Result != "all done" {
			t.Errorf("run %s: row changed: %+v", id, got.Run)
		}
		if !reflect.DeepEqual(got.Checkpoints, old.Checkpoints) || len(got.Checkpoints) != 1 ||
			!reflect.DeepEqual(got.Receipts, old.Receipts) || len(got.Receipts) != 1 ||
			!reflect.DeepEqual(got.Artifacts, old.Artifacts) || len(got.Artifacts) != 1 {
			t.Errorf("run %s: checkpoints, receipts or artifacts changed", id)
		}
		// Every event but the deltas stays, tool.completed with its output
		// replaced and nothing else changed.
		var kept []event.Event
		for _, e := range old.Events {
			if e.Type == event.MessageDelta {
				continue
			}
			if e.Type == event.ToolCompleted {
				var d event.ToolCompletedData
				if err := e.Decode(&d); err != nil {
					t.Fatal(err)
				}
				d.Output = PrunedOutput
				e.Data, _ = json.Marshal(d)
			}
			kept = append(kept, e)
		}
		if len(got.Events) != len(kept) {
			t.Fatalf("run %s: %d events, want %d", id, len(got.Events), len(kept))
		}
		for i := range kept {
			g, w := got.Events[i], kept[i]
			var gd, wd any
			_ = json.Unmarshal(g.Data, &gd)
			_ = json.Unmarshal(w.Data, &wd)
			g.Data, w.Data = nil, nil
			if !reflect.DeepEqual(g, w) || !reflect.DeepEqual(gd, wd) {
				t.Errorf("run %s event %d = %+v %v, want %+v %v", id, i, g, gd, w, wd)
			}
		}
		if len(got.ToolCalls) != 1 || got.ToolCalls[0].Output != PrunedOutput ||
			string(got.ToolCalls[0].Args) != string(old.ToolCalls[0].Args) || got.ToolCalls[0].Status != event.StatusCompleted {
			t.Errorf("run %s tool calls = %+v", id, got.ToolCalls)
		}
		// The conversation: kept whole where a model may be sent it again.
		wantMsgs := old.Messages
		if id == "old" {
			wantMsgs = append([]Message(nil), old.Messages...)
			for i := range wantMsgs {
				if wantMsgs[i].Role == "tool" {
					wantMsgs[i].Content = PrunedOutput
				}
			}
		}
		if !reflect.DeepEqual(got.Messages, wantMsgs) {
			t.Errorf("run %s messages = %+v, want %+v", id, got.Messages, wantMsgs)
		}
	}

	// The session's replay has the same seqs, with a placeholder for each
	// pruned delta, whatever the page size.
	sessionNow, err := db.ListSessionEvents(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessionNow) != len(sessionWas) {
		t.Fatalf("session replay has %d events, had %d", len(sessionNow), len(sessionWas))
	}
	for i, e := range sessionNow {
		w := sessionWas[i]
		if e.Seq != w.Seq || e.Type != w.Type || e.RunID != w.RunID || !e.TS.Equal(w.TS) && e.Type != event.MessageDelta {
			t.Errorf("replay event %d = %d %s, was %d %s", i, e.Seq, e.Type, w.Seq, w.Type)
		}
		if e.Type == event.MessageDelta && string(e.Data) != `{"text":"","pruned":true}` {
			t.Errorf("replayed delta %d data = %s", e.Seq, e.Data)
		}
	}
	for _, page := range []int{1, 2, 3, 7} {
		var paged []event.Event
		after := int64(0)
		for {
			evs, err := db.ListSessionEvents(ctx, "s1", after, page)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) > page {
				t.Fatalf("page of %d has %d events", page, len(evs))
			}
			paged = append(paged, evs...)
			if len(evs) < page {
				break
			}
			after = evs[len(evs)-1].Seq
		}
		if !reflect.DeepEqual(paged, sessionNow) {
			t.Errorf("pages of %d: %d events, want %d", page, len(paged), len(sessionNow))
		}
	}

	// Twice is once.
	again, err := db.Prune(ctx, PruneOptions{Before: f.before()})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, PruneReport{}) {
		t.Errorf("second prune = %+v, want nothing", again)
	}

	// A failed run resumed after it was pruned, and failed again, is
	// pruned again: what the resume added.
	if err := db.SetRunStatus(ctx, "failed", event.StatusRunning); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Hour)
	appendSeq(t, db, "failed", at(f.clock, []event.Event{delta("again"), assistantMsg("again", 0), finished(event.StatusFailed)})...)
	f.clock.Advance(31 * 24 * time.Hour)
	third, err := db.Prune(ctx, PruneOptions{Before: f.before()})
	if err != nil {
		t.Fatal(err)
	}
	// recent's 5 deltas, output and tool message; failed's new delta only.
	if !reflect.DeepEqual(third.Runs, []string{"recent", "failed"}) || third.Deltas != 6 || third.ToolOutputs != 1 || third.ToolMessages != 1 {
		t.Errorf("prune after a resume = %+v, want recent, and failed with 1 delta", third)
	}
}

// TestPruneSkipsHeldRuns: a run a live process holds (a resume or rewind
// under way) is not pruned, nor are blobs swept, until the lease ends.
func TestPruneSkipsHeldRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPruneFixture(t)
	if err := f.db.AcquireLease(ctx, "failed", "someone", time.Minute); err != nil {
		t.Fatal(err)
	}
	blobs := checkpoint.BlobsIn(f.dir)
	orphan := putOldBlob(t, blobs, "orphan", f.before().Add(-time.Hour))
	rep, err := f.db.Prune(ctx, PruneOptions{Before: f.before(), Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.Runs, []string{"old", "sess-run"}) || rep.BlobsSkipped != "1 run in progress" || rep.Blobs != 0 {
		t.Errorf("report = %+v, want old and sess-run, blobs skipped", rep)
	}
	if _, err := blobs.Get(orphan); err != nil {
		t.Errorf("blob swept while a run is in progress: %v", err)
	}
	if err := f.db.ReleaseLease(ctx, "failed", "someone"); err != nil {
		t.Fatal(err)
	}
	rep, err = f.db.Prune(ctx, PruneOptions{Before: f.before(), Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.Runs, []string{"failed"}) || rep.Blobs != 1 {
		t.Errorf("report = %+v, want failed and the orphan blob", rep)
	}
}

// putOldBlob saves content as a blob last written at mtime.
func putOldBlob(t *testing.T, blobs checkpoint.Blobs, content string, mtime time.Time) string {
	t.Helper()
	sum, err := blobs.PutBytes([]byte(content))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(blobs.Dir, "sha256", sum[:2], sum)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestPruneBlobs: only blobs no checkpoint names and older than the
// cutoff go; a dry run counts them and removes nothing.
func TestPruneBlobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPruneFixture(t)
	blobs := checkpoint.BlobsIn(f.dir)
	old := f.before().Add(-time.Hour)
	orphan := putOldBlob(t, blobs, "an event's data, stored in the journal since", old)
	young := putOldBlob(t, blobs, "saved a minute ago", f.clock.Now().Add(-time.Minute))
	referenced := putOldBlob(t, blobs, "a file as it was before a run", old)
	// A checkpoint of the unfinished run names it: it must stay.
	appendSeq(t, f.db, "interrupted", checkpointEvent("b.txt", referenced, true))

	dry, err := f.db.Prune(ctx, PruneOptions{Before: f.before(), Blobs: blobs, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sum := range []string{orphan, young, referenced} {
		if _, err := blobs.Get(sum); err != nil {
			t.Fatalf("dry run removed a blob: %v", err)
		}
	}
	rep, err := f.db.Prune(ctx, PruneOptions{Before: f.before(), Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len("an event's data, stored in the journal since"))
	if rep.Blobs != 1 || rep.BlobBytes != size || dry.Blobs != 1 || dry.BlobBytes != size {
		t.Errorf("blobs: dry run %d (%d bytes), prune %d (%d bytes); want 1 (%d bytes)", dry.Blobs, dry.BlobBytes, rep.Blobs, rep.BlobBytes, size)
	}
	if _, err := blobs.Get(orphan); err == nil {
		t.Error("the orphan blob is still there")
	}
	for _, sum := range []string{young, referenced} {
		if _, err := blobs.Get(sum); err != nil {
			t.Errorf("a blob that must stay is gone: %v", err)
		}
	}
}

// TestVacuumShrinks: after a prune, Vacuum gives the space back.
func TestVacuumShrinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newPruneFixture(t)
	var evs []event.Event
	for range 3000 {
		evs = append(evs, delta("some streamed words "))
	}
	createRun(t, f.db, "big")
	appendSeq(t, f.db, "big", at(f.clock, append(evs, finished(event.StatusCompleted)))...)
	f.clock.Advance(31 * 24 * time.Hour)
	if _, err := f.db.Prune(ctx, PruneOptions{Before: f.before()}); err != nil {
		t.Fatal(err)
	}
	before, after, err := f.db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after >= before || before-after < 3000*50 {
		t.Errorf("vacuum: %d bytes before, %d after; want at least %d freed", before, after, 3000*50)
	}
}
