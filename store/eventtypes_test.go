package store

import (
	"testing"

	"agent/event"
	"agent/event/eventtest"
)

// The projector names every run event type it projects; the others stay
// in the journal alone, each for the reason given here.
func TestProjectorCoversEveryEventType(t *testing.T) {
	eventtest.Covers(t, "store's projector (project)", eventtest.GoCases(t, "events.go", "project"), []string{
		event.IterationCompleted, // the iteration's count and promise came with iteration.started
		event.MessageDelta,       // the whole text comes with message.completed
		event.RewindCompleted,    // what a rewind restored is in the files; the checkpoints stay
		event.Retry,              // diagnostics: shown and journaled, nothing to project
		event.Heartbeat,
		event.Warning,
		event.HookCompleted, // read back from the journal by type (HookRecords, AttemptState)
		event.ToolProgress,  // how far a call had come: journaled and shown; its result is what counts
	})
}
