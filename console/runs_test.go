package console

import (
	"agent/event"
	"agent/store"
	"encoding/json"
	"strings"
	"testing"
)

// What people read: a receipt's address as written, an ended run's line
// without a dangling colon, a wait and its answer.
func TestRunsTextReadsPlainly(t *testing.T) {
	var b strings.Builder
	printReceipts(&b, "", []store.BoardReceipt{{Type: "email_sent", State: "done", Details: json.RawMessage(`{"to":"Bob \u003cbob@example.com\u003e"}`)}})
	if got := b.String(); !strings.Contains(got, `"to":"Bob <bob@example.com>"`) {
		t.Errorf("receipt line %q escapes the address", got)
	}
	done := event.New(event.RunCompleted, event.RunFinishedData{Status: "completed", Reason: "completed"})
	if got := EventLine(done); strings.HasSuffix(strings.TrimSpace(got), ":") {
		t.Errorf("event line %q ends with a dangling colon", got)
	}
	waiting := event.New(event.RunWaiting, event.RunWaitingData{Kind: event.WaitQuestion, Question: "Which branch?", Until: "2026-11-27T08:00:00Z"})
	if got := EventLine(waiting); !strings.Contains(got, "for an answer: Which branch? until 2026-11-27T08:00:00Z") {
		t.Errorf("event line %q does not say what the run waits for", got)
	}
}
