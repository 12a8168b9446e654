package store

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"agent/event"
	"agent/llm"
)

// appendSeq persists events for a run, numbering them after its last one.
func appendSeq(t *testing.T, db *DB, runID string, evs ...event.Event) {
	t.Helper()
	ctx := context.Background()
	next, err := db.NextSeq(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		evs[i].RunID = runID
		evs[i].Seq = next + int64(i)
	}
	if err := db.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
}

func userMsg(text string, iteration int) event.Event {
	return event.New(event.MessageCompleted, event.MessageData{Role: "user", Text: text, Iteration: iteration})
}

func assistantMsg(text string, iteration int, calls ...event.ToolCall) event.Event {
	return event.New(event.MessageCompleted, event.MessageData{
		Role: "assistant", Text: text, ToolCalls: calls, Iteration: iteration,
		Usage: &event.Usage{PromptTokens: 10, CompletionTokens: 5},
	})
}

func toolStarted(id, name, args string) event.Event {
	return event.New(event.ToolStarted, event.ToolStartedData{CallID: id, Name: name, Args: json.RawMessage(args)})
}

func toolCompleted(d event.ToolCompletedData) event.Event {
	return event.New(event.ToolCompleted, d)
}

func TestNextSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	if got, err := db.NextSeq(ctx, "run-1"); err != nil || got != 1 {
		t.Fatalf("NextSeq of an empty run = %d, %v; want 1", got, err)
	}
	appendSeq(t, db, "run-1", event.New(event.RunStarted, nil), event.New(event.Heartbeat, nil))
	if got, err := db.NextSeq(ctx, "run-1"); err != nil || got != 3 {
		t.Fatalf("NextSeq = %d, %v; want 3", got, err)
	}
}

func TestProjectConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")

	calls := []event.ToolCall{
		{ID: "c1", Name: "read_file", Arguments: `{"path":"a.txt"}`},
		{ID: "c2", Name: "write_file", Arguments: `{"path":"b.txt"}`},
	}
	appendSeq(t, db, "run-1",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "hi"}), // 1
		userMsg("hi", 0), // 2
		event.New(event.MessageDelta, event.MessageDeltaData{Text: "let me"}),           // 3
		assistantMsg("let me look", 0, calls...),                                        // 4
		toolStarted("c1", "read_file", `{"path":"a.txt"}`),                              // 5
		toolStarted("c2", "write_file", `{"path":"b.txt"}`),                             // 6
		toolCompleted(event.ToolCompletedData{CallID: "c1", OK: true, Output: "hello"}), // 7
	)

	conv, err := db.Conversation(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.Message{
		{Role: llm.RoleUser, Content: "hi"},
		{Role: llm.RoleAssistant, Content: "let me look", ToolCalls: []llm.ToolCall{
			{ID: "c1", Name: "read_file", Arguments: `{"path":"a.txt"}`},
			{ID: "c2", Name: "write_file", Arguments: `{"path":"b.txt"}`},
		}},
		{Role: llm.RoleTool, Content: "hello", ToolCallID: "c1"},
	}
	if !reflect.DeepEqual(conv, want) {
		t.Errorf("Conversation =\n%+v\nwant\n%+v", conv, want)
	}

	tcs, err := db.ToolCalls(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(tcs) != 2 {
		t.Fatalf("ToolCalls = %+v, want 2", tcs)
	}
	if c := tcs[0]; c.CallID != "c1" || c.Status != event.StatusCompleted || c.Output != "hello" ||
		c.Name != "read_file" || string(c.Args) != `{"path":"a.txt"}` || c.CompletedAt.IsZero() {
		t.Errorf("c1 = %+v", c)
	}
	if c := tcs[1]; c.CallID != "c2" || c.Status != event.StatusStarted || c.StartedAt.IsZero() || !c.CompletedAt.IsZero() {
		t.Errorf("c2 = %+v", c)
	}

	msgs, err := db.Messages(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, m := range msgs {
		seqs = append(seqs, m.Seq)
	}
	if !reflect.DeepEqual(seqs, []int64{2, 4, 7}) {
		t.Errorf("message seqs = %v, want [2 4 7]", seqs)
	}

	// Totals so far are on the run row before any terminal event, so a
	// resume after a crash knows what was spent.
	r, err := db.GetRun(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Turns != 1 || r.Usage != (event.Usage{PromptTokens: 10, CompletionTokens: 5}) {
		t.Errorf("running totals: turns %d usage %+v, want 1 turn, 10+5 tokens", r.Turns, r.Usage)
	}
}

func TestProjectToolCallLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name       string
		evs        []event.Event
		want       ToolCall // RunID, CallID and times not compared
		wantOutput string   // content of the last tool message
	}{
		{
			name: "failed with only an error",
			evs: []event.Event{
				toolStarted("c1", "shell", `{"cmd":"false"}`),
				toolCompleted(event.ToolCompletedData{CallID: "c1", OK: false, Error: "exit status 1"}),
			},
			want:       ToolCall{Name: "shell", Args: json.RawMessage(`{"cmd":"false"}`), Status: event.StatusFailed, Error: "exit status 1"},
			wantOutput: "exit status 1",
		},
		{
			name: "completed without started",
			evs: []event.Event{
				toolCompleted(event.ToolCompletedData{CallID: "c1", Name: "grep", OK: true, Output: "x", Truncated: true}),
			},
			want:       ToolCall{Name: "grep", Status: event.StatusCompleted, Output: "x", Truncated: true},
			wantOutput: "x",
		},
		{
			name: "restarted after resume",
			evs: []event.Event{
				toolStarted("c1", "shell", `{"cmd":"a"}`),
				toolCompleted(event.ToolCompletedData{CallID: "c1", OK: false, Error: "boom"}),
				toolStarted("c1", "shell", `{"cmd":"b"}`),
			},
			want:       ToolCall{Name: "shell", Args: json.RawMessage(`{"cmd":"b"}`), Status: event.StatusStarted},
			wantOutput: "boom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := openTest(t)
			createRun(t, db, "run-1")
			appendSeq(t, db, "run-1", tt.evs...)
			tcs, err := db.ToolCalls(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(tcs) != 1 {
				t.Fatalf("ToolCalls = %+v, want 1", tcs)
			}
			got := tcs[0]
			got.RunID, got.CallID, got.StartedAt, got.CompletedAt = "", "", time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("tool call = %+v\nwant %+v", got, tt.want)
			}
			msgs, err := db.Messages(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 0 || msgs[len(msgs)-1].Content != tt.wantOutput || msgs[len(msgs)-1].ToolCallID != "c1" {
				t.Errorf("tool messages = %+v, want last content %q", msgs, tt.wantOutput)
			}
		})
	}
}

func TestProjectIterations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	appendSeq(t, db, "run-1",
		event.New(event.IterationStarted, event.IterationData{Iteration: 1, MaxIterations: 3, Promise: "DONE"}),
		userMsg("task", 1),
		assistantMsg("working", 1, event.ToolCall{ID: "c1", Name: "ls", Arguments: "{}"}),
		toolStarted("c1", "ls", "{}"),
		toolCompleted(event.ToolCompletedData{CallID: "c1", OK: true, Output: "a b"}),
		event.New(event.IterationCompleted, event.IterationData{Iteration: 1, MaxIterations: 3}),
		event.New(event.IterationStarted, event.IterationData{Iteration: 2, MaxIterations: 3, Promise: "DONE"}),
		userMsg("task again", 2),
		assistantMsg("DONE", 2),
	)

	conv, err := db.Conversation(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.Message{
		{Role: llm.RoleUser, Content: "task again"},
		{Role: llm.RoleAssistant, Content: "DONE"},
	}
	if !reflect.DeepEqual(conv, want) {
		t.Errorf("Conversation = %+v, want %+v", conv, want)
	}

	msgs, err := db.Messages(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	var iters []int
	for _, m := range msgs {
		iters = append(iters, m.Iteration)
	}
	if !reflect.DeepEqual(iters, []int{1, 1, 1, 2, 2}) {
		t.Errorf("message iterations = %v, want [1 1 1 2 2]", iters)
	}

	r, err := db.GetRun(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.IterationCount != 2 || r.MaxIterations != 3 || r.CompletionPromise != "DONE" {
		t.Errorf("run iteration state = %d/%d %q", r.IterationCount, r.MaxIterations, r.CompletionPromise)
	}

	if _, err := db.Conversation(ctx, "missing"); err == nil {
		t.Error("Conversation of a missing run succeeded")
	}
}

func TestProjectTerminal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		typ    string
		status string
	}{
		{event.RunCompleted, event.StatusCompleted},
		{event.RunFailed, event.StatusFailed},
		{event.RunCancelled, event.StatusCancelled},
		{event.RunInterrupted, event.StatusInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			t.Parallel()
			db := openTest(t)
			createRun(t, db, "run-1")
			e := event.New(tt.typ, event.RunFinishedData{
				Status: tt.status, Result: "the answer", Turns: 4, ExitCode: 7, Reason: "why",
				Usage: event.Usage{PromptTokens: 100, CompletionTokens: 20},
			})
			e.TS = time.Date(2026, 11, 22, 8, 1, 30, 123456000, time.UTC)
			appendSeq(t, db, "run-1", event.New(event.RunStarted, nil), e)

			r, err := db.GetRun(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tt.status || r.Result != "the answer" || r.Turns != 4 || r.ExitCode != 7 ||
				r.Reason != "why" || r.Usage != (event.Usage{PromptTokens: 100, CompletionTokens: 20}) ||
				!r.FinishedAt.Equal(e.TS) {
				t.Errorf("run after %s = %+v", tt.typ, r)
			}

			// A resumed run starts again.
			appendSeq(t, db, "run-1", event.New(event.RunStarted, event.RunStartedData{Resumed: true}))
			r, err = db.GetRun(ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != event.StatusRunning || !r.FinishedAt.IsZero() {
				t.Errorf("run after resume = %+v", r)
			}
		})
	}
}

func TestMalformedDataStillStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")

	raw := func(typ, data string) event.Event {
		e := event.New(typ, nil)
		if data != "" {
			e.Data = json.RawMessage(data)
		}
		return e
	}
	evs := []event.Event{
		raw(event.MessageCompleted, `{"role":"user","text":5}`),
		raw(event.MessageCompleted, `{"role":"system","text":"not a conversation role"}`),
		raw(event.ToolStarted, `"nope"`),
		raw(event.ToolCompleted, ``),
		raw(event.IterationStarted, `[]`),
		raw(event.RunCompleted, `{"usage":"lots"}`),
	}
	appendSeq(t, db, "run-1", evs...)

	stored, err := db.ListEvents(ctx, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(evs) {
		t.Fatalf("stored %d events, want %d", len(stored), len(evs))
	}
	for i, e := range stored {
		if e.Type != evs[i].Type || string(e.Data) != string(evs[i].Data) {
			t.Errorf("event %d = %s %s, want %s %s", i, e.Type, e.Data, evs[i].Type, evs[i].Data)
		}
	}
	if msgs, _ := db.Messages(ctx, "run-1"); len(msgs) != 0 {
		t.Errorf("messages projected from bad data: %+v", msgs)
	}
	if tcs, _ := db.ToolCalls(ctx, "run-1"); len(tcs) != 0 {
		t.Errorf("tool calls projected from bad data: %+v", tcs)
	}
	r, err := db.GetRun(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != event.StatusCompleted || r.IterationCount != 0 {
		t.Errorf("run = status %s iteration %d, want completed 0", r.Status, r.IterationCount)
	}
}

func TestAppendEventsIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	appendSeq(t, db, "run-1", event.New(event.RunStarted, nil))

	ev := func(runID string, seq int64, typ string, data any) event.Event {
		e := event.New(typ, data)
		e.RunID, e.Seq = runID, seq
		return e
	}
	tests := []struct {
		name string
		evs  []event.Event
	}{
		{"duplicate seq", []event.Event{ev("run-1", 2, event.MessageCompleted, event.MessageData{Role: "user", Text: "x"}), ev("run-1", 1, event.Heartbeat, nil)}},
		{"unknown run", []event.Event{ev("run-1", 2, event.MessageCompleted, event.MessageData{Role: "user", Text: "x"}), ev("nope", 1, event.Heartbeat, nil)}},
		{"no seq", []event.Event{ev("run-1", 0, event.Heartbeat, nil)}},
		{"no run", []event.Event{ev("", 2, event.Heartbeat, nil)}},
	}
	for _, tt := range tests {
		if err := db.AppendEvents(ctx, tt.evs); err == nil {
			t.Errorf("%s: AppendEvents succeeded", tt.name)
		}
	}
	stored, err := db.ListEvents(ctx, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 {
		t.Errorf("failed batches left %d events, want 1", len(stored))
	}
	if msgs, _ := db.Messages(ctx, "run-1"); len(msgs) != 0 {
		t.Errorf("failed batches left messages: %+v", msgs)
	}
}

func TestListEventsPaging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	e := event.New(event.Warning, event.WarningData{Message: "careful"})
	e.SessionID, e.PhaseID, e.Attempt = "sess", "gather", 2
	appendSeq(t, db, "run-1", event.New(event.RunStarted, nil), e, event.New(event.Heartbeat, nil))

	got, err := db.ListEvents(ctx, "run-1", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("ListEvents(after 1, limit 1) = %d events", len(got))
	}
	g := got[0]
	if g.V != event.Version || g.Seq != 2 || g.RunID != "run-1" || g.SessionID != "sess" || g.PhaseID != "gather" ||
		g.Attempt != 2 || g.Type != event.Warning || string(g.Data) != string(e.Data) ||
		!g.TS.Equal(e.TS.Truncate(time.Microsecond)) {
		t.Errorf("ListEvents = %+v\nwant %+v", g, e)
	}
}
