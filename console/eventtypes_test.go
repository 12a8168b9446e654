package console

import (
	"strings"
	"testing"

	"agent/event"
	"agent/event/eventtest"
)

// The printer and the board name every run event type they show; the
// others they leave out, each for the reason given here.
func TestPrinterCoversEveryEventType(t *testing.T) {
	eventtest.Covers(t, "the printer (Printer.render)", eventtest.GoCases(t, "console.go", "Printer.render"), []string{
		event.PlanCreated, event.PhaseStarted, event.PhaseCompleted, event.PhaseFailed, // a harness: the board shows them
		event.VerificationCompleted, event.LearningRecorded, event.ApproachFailed, // phases' only
		event.ReceiptRecorded, event.EffectFailed, // the tool's own line says it (✓, or ✗ with why)
		event.CheckpointCreated, event.RewindCompleted, // agent rewind prints its own report
		event.Heartbeat, // keeps a child alive; nothing to show
	})
}

func TestBoardCoversEveryEventType(t *testing.T) {
	eventtest.Covers(t, "the phase board (Board.Print)", eventtest.GoCases(t, "board.go", "Board.Print"), []string{
		event.IterationStarted, event.IterationCompleted, // inside a phase: its tool lines show the work
		event.MessageDelta, event.MessageCompleted, // the phases' text is in their logs and agent runs show
		event.ArtifactCreated, event.ReceiptRecorded, event.LearningRecorded, event.ApproachFailed, // their verification says what counts
		event.EffectFailed,                                                     // the tool's ✗ line says it
		event.ToolProgress,                                                     // a phase's calls are not drawn one by one
		event.CheckpointCreated, event.RewindCompleted, event.ContextCompacted, // bookkeeping of a phase's conversation and files
		event.HookCompleted, // a phase's hooks: what they decide shows as its tool lines; a failed one as a warning
		event.Heartbeat,
	})
}

// An effect whose outcome was lost is said by both, with the way to send
// it again.
func TestUnknownEffectIsSaid(t *testing.T) {
	e := event.New(event.EffectUnknown, event.EffectUnknownData{Key: "send_email-1", Error: "connection reset"})
	e.PhaseID = "notify"
	var out, errw strings.Builder
	NewPrinter(&out, &errw, false).Print(e)
	NewBoard(&out, &errw, false).Print(e)
	got := errw.String()
	if n := strings.Count(got, "send_email-1 may or may not have happened (connection reset)"); n != 2 || !strings.Contains(got, "--resend-unknown") ||
		!strings.Contains(got, "notify: side effect") {
		t.Errorf("printer and board said %q", got)
	}
}
