package acp

import (
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"agent/event"
	"agent/event/eventtest"
)

// The editor is shown every run event type that says what the run says,
// does or plans; the others it leaves out, each for the reason given here.
func TestUpdatesCoverEveryEventType(t *testing.T) {
	eventtest.Covers(t, "agent acp's updates (updater.updates)", eventtest.GoCases(t, "updates.go", "updater.updates"), []string{
		// The prompt's answer says how a live run ended; a completed
		// run's answer is its last message.
		event.RunCompleted,
		// Bookkeeping the editor has no place for: the store and agent
		// runs show have it.
		event.IterationStarted, event.IterationCompleted, event.ArtifactCreated, event.ReceiptRecorded,
		event.LearningRecorded, event.ApproachFailed, event.VerificationCompleted, event.CheckpointCreated,
		event.RewindCompleted, event.ContextCompacted, event.EffectFailed, event.EffectUnknown,
		event.Retry, event.Heartbeat, event.Warning,
		// What a hook decided reaches the editor as what the run then
		// does: a call denied, a prompt changed, a run stopped.
		event.HookCompleted,
	})
}

// TestStopReasons: each way a run ends is one ACP stop reason, or, for a
// run that failed, no stop reason (the prompt answers with an error).
func TestStopReasons(t *testing.T) {
	for _, tc := range []struct {
		status, reason string
		want           sdk.StopReason
		ok             bool
	}{
		{event.StatusCompleted, event.ReasonCompleted, sdk.StopReasonEndTurn, true},
		{event.StatusFailed, event.ReasonMaxTurns, sdk.StopReasonMaxTurnRequests, true},
		{event.StatusFailed, event.ReasonMaxIterations, sdk.StopReasonMaxTurnRequests, true},
		{event.StatusFailed, event.ReasonToolLoop, sdk.StopReasonMaxTurnRequests, true},
		{event.StatusFailed, event.ReasonBudgetExhausted, sdk.StopReasonMaxTokens, true},
		{event.StatusInterrupted, event.ReasonInterrupted, sdk.StopReasonCancelled, true},
		{event.StatusCancelled, event.ReasonCancelled, sdk.StopReasonCancelled, true},
		{event.StatusWaiting, event.ReasonWaiting, sdk.StopReasonCancelled, true},
		{event.StatusFailed, event.ReasonProvider, "", false},
		{event.StatusFailed, event.ReasonError, "", false},
		{event.StatusFailed, event.ReasonVerification, "", false},
	} {
		got, ok := stopReason(event.RunFinishedData{Status: tc.status, Reason: tc.reason})
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s/%s: %q, %v; want %q, %v", tc.status, tc.reason, got, ok, tc.want, tc.ok)
		}
	}
}

// A running call's progress is its content in the editor, until its
// result replaces it; progress of a call the editor was not shown is not.
func TestToolProgressUpdatesTheCall(t *testing.T) {
	s := &session{calls: map[string]bool{}, waits: map[string]string{}}
	u := (&agent{}).updater(s, true)
	progress := event.New(event.ToolProgress, event.ToolProgressData{CallID: "c1", Name: "mcp__docs__index", Progress: 3, Total: 5, Message: "step 3"})
	if got := u.updates(progress); len(got) != 0 {
		t.Errorf("progress of a call not shown: %+v", got)
	}
	u.updates(event.New(event.ToolStarted, event.ToolStartedData{CallID: "c1", Name: "mcp__docs__index", Args: []byte(`{}`)}))
	got := u.updates(progress)
	if len(got) != 1 || got[0].ToolCallUpdate == nil {
		t.Fatalf("updates: %+v", got)
	}
	c := got[0].ToolCallUpdate
	if string(c.ToolCallId) != "c1" || len(c.Content) != 1 || c.Content[0].Content == nil || c.Content[0].Content.Content.Text == nil ||
		c.Content[0].Content.Content.Text.Text != "3/5 step 3" {
		t.Errorf("tool call update: %+v", c)
	}
}
