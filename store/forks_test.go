package store

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"agent/event"
	"agent/llm"
)

// forkSource builds a session of two runs and returns the seqs of
// run-2's tool.started and tool.completed, the inside of its tool round.
func forkSource(t *testing.T, db *DB) (started, completed int64) {
	t.Helper()
	createSession(t, db, "src")
	createSessionRun(t, db, "src", "run-1")
	createSessionRun(t, db, "src", "run-2")
	j := sessionJournal(t, db, "src")
	sessionAppend(t, j, "run-1",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "hi"}),
		userMsg("hi", 0),
		assistantMsg("looking", 0, event.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"path":"a"}`}),
		toolStarted("c1", "read_file", `{"path":"a"}`),
		toolCompleted(event.ToolCompletedData{CallID: "c1", Name: "read_file", OK: false, Error: "no such file"}),
		assistantMsg("there is no a", 0),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed"}),
	)
	// run-2 reuses the call id c1, as a scripted model would.
	evs := sessionAppend(t, j, "run-2",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "then b"}),
		userMsg("then b", 0),
		event.New(event.MessageDelta, event.MessageDeltaData{Text: "read"}),
		assistantMsg("reading b", 0, event.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"path":"b"}`}),
		toolStarted("c1", "read_file", `{"path":"b"}`),
		toolCompleted(event.ToolCompletedData{CallID: "c1", Name: "read_file", OK: true, Output: "B", Truncated: true}),
		assistantMsg("b says B", 0),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed"}),
	)
	return evs[4].Seq, evs[5].Seq
}

func TestForkSessionAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	forkSource(t, db)
	srcEvents, err := db.ListSessionEvents(ctx, "src", 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	f, err := db.ForkSession(ctx, "src", "fork", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != "fork" || f.ParentID != "src" || f.ForkedFromSeq != 0 || f.Title != "title of src" || f.Runs != 1 {
		t.Errorf("fork = %+v", f)
	}

	want, err := db.SessionPrior(ctx, "src", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.SessionPrior(ctx, "fork", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 8 || !reflect.DeepEqual(got, want) {
		t.Errorf("fork prior =\n%+v\nwant the source's\n%+v", got, want)
	}

	// Replaying the fork shows its history as one finished run.
	evs, err := db.ListSessionEvents(ctx, "fork", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []string{
		event.RunStarted,
		event.MessageCompleted, event.MessageCompleted, event.ToolStarted, event.ToolCompleted, event.MessageCompleted,
		event.MessageCompleted, event.MessageCompleted, event.ToolStarted, event.ToolCompleted, event.MessageCompleted,
		event.RunCompleted,
	}
	if len(evs) != len(wantTypes) || f.LastSeq != int64(len(wantTypes)) {
		t.Fatalf("fork has %d events (last seq %d), want %d", len(evs), f.LastSeq, len(wantTypes))
	}
	runID := evs[0].RunID
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.Type != wantTypes[i] || e.SessionID != "fork" || e.RunID != runID {
			t.Errorf("fork event %d = seq %d %s session %q run %q", i, e.Seq, e.Type, e.SessionID, e.RunID)
		}
	}
	r, err := db.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != event.StatusCompleted || r.Kind != KindRun || r.SessionID != "fork" ||
		r.Prompt != "forked from session src at seq 15" || r.Result != "b says B" || r.Turns != 4 {
		t.Errorf("fork's run = %+v", r)
	}
	// The tool calls keep name, arguments and outcome, per source run.
	d := struct{ C1, C2 event.ToolCompletedData }{}
	if err := evs[4].Decode(&d.C1); err != nil {
		t.Fatal(err)
	}
	if err := evs[9].Decode(&d.C2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.C1, event.ToolCompletedData{CallID: "c1", Name: "read_file", OK: false, Error: "no such file"}) ||
		!reflect.DeepEqual(d.C2, event.ToolCompletedData{CallID: "c1", Name: "read_file", OK: true, Output: "B", Truncated: true}) {
		t.Errorf("fork tool results = %+v", d)
	}
	var s event.ToolStartedData
	if err := evs[8].Decode(&s); err != nil || string(s.Args) != `{"path":"b"}` {
		t.Errorf("fork tool.started = %+v, %v", s, err)
	}

	// The source is untouched, and a fork of the fork is the same again.
	if after, err := db.ListSessionEvents(ctx, "src", 0, 0); err != nil || !reflect.DeepEqual(after, srcEvents) {
		t.Errorf("source events changed by the fork: %v", err)
	}
	if _, err := db.ForkSession(ctx, "fork", "fork-2", "again", 0); err != nil {
		t.Fatal(err)
	}
	if got2, err := db.SessionPrior(ctx, "fork-2", ""); err != nil || !reflect.DeepEqual(got2, want) {
		t.Errorf("fork of the fork prior = %+v, %v", got2, err)
	}

	if _, err := db.ForkSession(ctx, "src", "fork", "", 0); err == nil {
		t.Error("ForkSession onto an existing id succeeded")
	}
	if _, err := db.ForkSession(ctx, "missing", "fork-3", "", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("ForkSession of a missing session: err = %v, want ErrNotFound", err)
	}
	if _, err := db.GetSession(ctx, "fork-3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("failed fork left a session behind: %v", err)
	}
}

func TestForkSessionMidTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	started, completed := forkSource(t, db)
	run1, err := db.SessionPrior(ctx, "src", "run-2")
	if err != nil {
		t.Fatal(err)
	}
	cat := func(tail ...llm.Message) []llm.Message {
		return append(append([]llm.Message(nil), run1...), tail...)
	}
	user := llm.Message{Role: llm.RoleUser, Content: "then b"}
	call := llm.Message{Role: llm.RoleAssistant, Content: "reading b", ToolCalls: []llm.ToolCall{
		{ID: "c1", Name: "read_file", Arguments: `{"path":"b"}`}}}
	result := llm.Message{Role: llm.RoleTool, Content: "B", ToolCallID: "c1"}

	tests := []struct {
		name string
		at   int64
		want []llm.Message
	}{
		// Inside the round: its call would have no result, so the fork
		// ends before the assistant message that made it.
		{"call started", started, cat(user)},
		{"call made", started - 1, cat(user)},
		{"call answered", completed, cat(user, call, result)},
		{"before run-2", 7, run1},
	}
	for i, tt := range tests {
		id := "fork-" + string(rune('a'+i))
		f, err := db.ForkSession(ctx, "src", id, tt.name, tt.at)
		if err != nil {
			t.Fatal(err)
		}
		if f.ForkedFromSeq != tt.at || f.ParentID != "src" {
			t.Errorf("%s: fork = %+v", tt.name, f)
		}
		got, err := db.SessionPrior(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s (seq %d): fork prior =\n%+v\nwant\n%+v", tt.name, tt.at, got, tt.want)
		}
		// A fork's own journal continues after the copied history.
		runs, err := db.ListSessionRuns(ctx, id)
		if err != nil || len(runs) != 1 {
			t.Fatalf("%s: fork runs = %+v, %v", tt.name, runs, err)
		}
		createSessionRun(t, db, id, id+"-next")
		e := sessionAppend(t, sessionJournal(t, db, id), id+"-next", event.New(event.Heartbeat, nil))[0]
		if e.Seq != f.LastSeq+1 {
			t.Errorf("%s: next run's first seq = %d, want %d", tt.name, e.Seq, f.LastSeq+1)
		}
	}

	if _, err := db.ForkSession(ctx, "src", "fork-neg", "", -1); err == nil {
		t.Error("ForkSession at a negative seq succeeded")
	}
}

// A cut inside a Ralph loop takes the iteration current at the cut, not
// the run's last one.
func TestForkSessionIteration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "src")
	createSessionRun(t, db, "src", "run-1")
	evs := sessionAppend(t, sessionJournal(t, db, "src"), "run-1",
		event.New(event.IterationStarted, event.IterationData{Iteration: 1, MaxIterations: 2}),
		userMsg("try 1", 1),
		assistantMsg("did 1", 1),
		event.New(event.IterationStarted, event.IterationData{Iteration: 2, MaxIterations: 2}),
		userMsg("try 2", 2),
	)
	if _, err := db.ForkSession(ctx, "src", "fork", "", evs[2].Seq); err != nil {
		t.Fatal(err)
	}
	got, err := db.SessionPrior(ctx, "fork", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.Message{{Role: llm.RoleUser, Content: "try 1"}, {Role: llm.RoleAssistant, Content: "did 1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fork prior = %+v, want %+v", got, want)
	}
}

// A compaction is part of the journal: the conversation it leaves, a
// session's memory after it, and a fork of the session are the same.
func TestCompactionRebuildsAndForks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "src")
	createSessionRun(t, db, "src", "run-1")
	createSessionRun(t, db, "src", "run-2")
	j := sessionJournal(t, db, "src")
	sessionAppend(t, j, "run-1",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "first"}),
		userMsg("first", 0), assistantMsg("a long first answer", 0),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed"}),
	)
	sessionAppend(t, j, "run-2",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "second"}),
		userMsg("second", 0), assistantMsg("step one", 0), userMsg("more", 0), assistantMsg("step two", 0),
		// The earlier run and the first exchange of this one become a summary.
		event.New(event.ContextCompacted, event.ContextCompactedData{From: 1, Count: 2, Prior: true, Summary: "did first and step one"}),
		assistantMsg("step three", 0),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed"}),
	)
	conv, err := db.Conversation(ctx, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range conv {
		got = append(got, m.Content)
	}
	want := []string{"second", "[Summary of the earlier conversation, compacted to fit the context window]\ndid first and step one", "step two", "step three"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("conversation after compaction = %q\nwant %q", got, want)
	}
	prior, err := db.SessionPrior(ctx, "src", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(prior) != len(conv) || prior[0].Content != "second" {
		t.Errorf("the session's memory still holds the run the summary replaced: %+v", prior)
	}
	if resumed, err := db.SessionPrior(ctx, "src", "run-2"); err != nil || len(resumed) != 0 {
		t.Errorf("run-2's own prior after it compacted the earlier runs = %+v, %v; want none", resumed, err)
	}
	evs, err := db.ListEvents(ctx, "run-2", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var d event.ContextCompactedData
	for _, e := range evs {
		if e.Type == event.ContextCompacted {
			e.Decode(&d)
		}
	}
	if d.ReplacedSeqFrom == 0 || d.ReplacedSeqTo <= d.ReplacedSeqFrom {
		t.Errorf("the stored event's replaced seqs = %d..%d", d.ReplacedSeqFrom, d.ReplacedSeqTo)
	}

	if _, err := db.ForkSession(ctx, "src", "fork", "", 0); err != nil {
		t.Fatal(err)
	}
	forked, err := db.SessionPrior(ctx, "fork", "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(forked, prior) {
		t.Errorf("the fork's memory =\n%+v\nwant the source's\n%+v", forked, prior)
	}
}
