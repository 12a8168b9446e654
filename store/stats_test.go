package store

import (
	"context"
	"reflect"
	"testing"
	"time"

	"agent/event"
)

// TestStats: runs by shown status (queued and planned included), tokens
// and tool calls by tool and outcome over every run, job runs by status;
// a fork's copies and calls still under way are not counted.
func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)

	st, err := db.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Runs) != 0 || st.PromptTokens != 0 || len(st.ToolCalls) != 0 || len(st.JobRuns) != 0 {
		t.Fatalf("Stats of an empty store = %+v", st)
	}

	createSession(t, db, "src")
	createSessionRun(t, db, "src", "run-1")
	j := sessionJournal(t, db, "src")
	sessionAppend(t, j, "run-1",
		event.New(event.RunStarted, event.RunStartedData{Prompt: "hi"}),
		userMsg("hi", 0),
		assistantMsg("looking", 0,
			event.ToolCall{ID: "c1", Name: "read_file", Arguments: `{}`}, event.ToolCall{ID: "c2", Name: "read_file", Arguments: `{}`}),
		toolStarted("c1", "read_file", `{"path":"a"}`),
		toolCompleted(event.ToolCompletedData{CallID: "c1", Name: "read_file", OK: false, Error: "no such file"}),
		toolStarted("c2", "read_file", `{"path":"b"}`),
		toolCompleted(event.ToolCompletedData{CallID: "c2", Name: "read_file", OK: true, Output: "B"}),
		assistantMsg("writing", 0, event.ToolCall{ID: "c3", Name: "write_file", Arguments: `{}`}),
		toolStarted("c3", "write_file", `{"path":"c"}`),
		toolCompleted(event.ToolCompletedData{CallID: "c3", Name: "write_file", OK: true}),
		assistantMsg("done", 0),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed", Usage: event.Usage{PromptTokens: 30, CompletionTokens: 15}}),
	)
	// A fork copies run-1's conversation and calls: nothing ran again.
	if _, err := db.ForkSession(ctx, "src", "fork", "", 0); err != nil {
		t.Fatal(err)
	}
	// run-2 is running, with a call under way.
	createRun(t, db, "run-2")
	appendSeq(t, db, "run-2",
		event.New(event.RunStarted, nil),
		assistantMsg("bash", 0, event.ToolCall{ID: "c1", Name: "bash", Arguments: `{}`}),
		toolStarted("c1", "bash", `{"command":"sleep 9"}`),
	)
	// run-3 was planned (--plan), run-4 failed, run-5 waits for a worker.
	createRun(t, db, "run-3")
	appendSeq(t, db, "run-3", event.New(event.RunInterrupted, event.RunFinishedData{Status: "interrupted", Reason: event.ReasonPlanned}))
	createRun(t, db, "run-4")
	appendSeq(t, db, "run-4", event.New(event.RunFailed, event.RunFinishedData{Status: "failed", Reason: event.ReasonMaxTurns}))
	if err := db.CreateRun(ctx, &Run{ID: "run-5", Prompt: "later", Queue: event.StatusWaiting}, "", 0); err != nil {
		t.Fatal(err)
	}
	createJob(t, db, "job", "nightly", time.Now().Add(time.Hour))
	tick := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for i, status := range []string{event.StatusCompleted, event.StatusFailed, event.StatusCompleted} {
		if _, err := db.ClaimTick(ctx, "job", tick.Add(time.Duration(i)*time.Hour), 1, status); err != nil {
			t.Fatal(err)
		}
	}

	if st, err = db.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	wantRuns := map[string]int64{
		event.StatusCompleted: 1, event.StatusRunning: 1, event.StatusPlanned: 1, event.StatusFailed: 1, event.StatusQueued: 1,
	}
	if !reflect.DeepEqual(st.Runs, wantRuns) {
		t.Errorf("Runs = %v, want %v", st.Runs, wantRuns)
	}
	// run-1's 30 and 15, and run-2's 10 and 5 so far.
	if st.PromptTokens != 40 || st.CompletionTokens != 20 {
		t.Errorf("tokens = %d prompt, %d completion; want 40, 20", st.PromptTokens, st.CompletionTokens)
	}
	wantCalls := []ToolCallCount{
		{Tool: "read_file", OK: true, Count: 1},
		{Tool: "read_file", OK: false, Count: 1},
		{Tool: "write_file", OK: true, Count: 1},
	}
	if !reflect.DeepEqual(st.ToolCalls, wantCalls) {
		t.Errorf("ToolCalls = %+v, want %+v", st.ToolCalls, wantCalls)
	}
	if want := map[string]int64{event.StatusCompleted: 2, event.StatusFailed: 1}; !reflect.DeepEqual(st.JobRuns, want) {
		t.Errorf("JobRuns = %v, want %v", st.JobRuns, want)
	}
}
