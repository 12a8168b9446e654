package store

import (
	"context"
	"errors"
	"testing"

	"agent/event"
)

// TestSubRuns: a sub-run is found again by its parent's call (the latest,
// when a call id repeats); a sub-run's event copied into its parent's
// stream (subagent set) is stored and listed with it but changes nothing
// of the parent (its messages, turns, tool calls); a task call's
// tool.completed adds its sub-run's usage to the parent's; and deleting
// the parent's session deletes the sub-run.
func TestSubRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createSession(t, db, "s")
	createSessionRun(t, db, "s", "parent")
	for _, id := range []string{"sub-1", "sub-2"} {
		if err := db.CreateRun(ctx, &Run{ID: id, Prompt: "find it", ParentRunID: "parent", ParentCall: "c1", Description: "look"}, "", 0); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := db.SubRun(ctx, "parent", "c1"); err != nil || r.ID != "sub-2" || r.Description != "look" || r.ParentRunID != "parent" {
		t.Errorf("SubRun = %+v, %v; want the latest, sub-2", r, err)
	}
	if _, err := db.SubRun(ctx, "parent", "c2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SubRun of a call without one: %v, want ErrNotFound", err)
	}
	if subs, err := db.SubRuns(ctx, "parent"); err != nil || len(subs) != 2 || subs[0].ID != "sub-1" {
		t.Errorf("SubRuns = %+v, %v", subs, err)
	}

	usage := event.Usage{PromptTokens: 100, CompletionTokens: 10}
	copied := event.New(event.MessageCompleted, event.MessageData{Role: "assistant", Text: "found", Usage: &usage})
	copied.Subagent = "sub-2"
	started := event.New(event.ToolStarted, event.ToolStartedData{CallID: "c9", Name: "bash"})
	started.Subagent = "sub-2"
	done := event.New(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", Name: "task", OK: true, Output: "found", Subagent: "sub-2", Usage: &usage})
	j := sessionJournal(t, db, "s")
	sessionAppend(t, j, "parent", event.New(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "task"}), copied, started, done)

	evs, err := db.ListSessionEvents(ctx, "s", 0, 0)
	if err != nil || len(evs) != 4 || evs[1].Subagent != "sub-2" || evs[1].RunID != "parent" || evs[0].Subagent != "" {
		t.Fatalf("session events %+v, %v: want the copy listed with its subagent", evs, err)
	}
	p, err := db.GetRun(ctx, "parent")
	if err != nil || p.Turns != 0 || p.Usage != usage {
		t.Errorf("parent %+v, %v: want no turn of the sub-run's, and its usage once (from the task call)", p, err)
	}
	msgs, err := db.Messages(ctx, "parent")
	if err != nil || len(msgs) != 1 || msgs[0].Role != "tool" {
		t.Errorf("parent messages %+v, %v: want the task call's result only", msgs, err)
	}
	calls, err := db.ToolCalls(ctx, "parent")
	if err != nil || len(calls) != 1 || calls[0].CallID != "c1" {
		t.Errorf("parent tool calls %+v, %v: want the task call only", calls, err)
	}

	sessionAppend(t, j, "parent", event.New(event.RunCompleted, event.RunFinishedData{Status: event.StatusCompleted}))
	if _, err := db.DeleteSession(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetRun(ctx, "sub-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a sub-run after its parent's session was deleted: %v", err)
	}
}
