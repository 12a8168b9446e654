package telemetry

import (
	"testing"

	"agent/event"
	"agent/event/eventtest"
)

// The trace names every run event type that makes or ends a span or adds
// to one; the others it leaves out, each for the reason given here.
func TestTraceCoversEveryEventType(t *testing.T) {
	eventtest.Covers(t, "the trace (Trace.Observe)", eventtest.GoCases(t, "trace.go", "Trace.Observe"), []string{
		// What a run made, recorded or verified is in the store and the
		// event stream; a trace is about where the time went.
		event.ArtifactCreated, event.ReceiptRecorded, event.LearningRecorded, event.ApproachFailed,
		event.VerificationCompleted, event.CheckpointCreated, event.RewindCompleted, event.ContextCompacted,
		event.EffectFailed, event.EffectUnknown,
		event.Retry,        // a retried call is one model-call span: its time includes the retries
		event.Warning,      // diagnostics for people
		event.ToolProgress, // within the tool call's span
		// A parked run's drive ends without a terminal event: its trace
		// is sent as it stands; the wait's time is between drives.
		event.RunWaiting, event.WaitResolved,
		event.HookCompleted, // the operator's commands: their time is in duration_ms, and in the spans around them
	})
}
