package console

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"agent/event"
)

func phaseEvent(typ, phase string, attempt int, data any) event.Event {
	e := event.New(typ, data)
	e.PhaseID, e.Attempt = phase, attempt
	return e
}

// Off a terminal the board prints one plain line per transition and never
// an escape sequence.
func TestBoardPlainLines(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	b := NewBoard(&out, &errb, false)
	plan := `{"objective":"Report","phases":[{"id":"gather","title":"Gather","depends_on":[],"evidence":{"type":"artifact","artifacts":["s.md"]}},` +
		`{"id":"write","title":"Write","depends_on":["gather"],"evidence":{"type":"programmatic","command":"make check"}}]}`
	for _, e := range []event.Event{
		event.New(event.PlanCreated, event.PlanData{Plan: []byte(plan), Path: ".agent/runs/r/mission.json"}),
		phaseEvent(event.PhaseStarted, "gather", 1, event.PhaseData{}),
		phaseEvent(event.ToolStarted, "gather", 1, event.ToolStartedData{CallID: "c1", Name: "write_file", Args: []byte(`{"path":"s.md"}`)}),
		phaseEvent(event.ToolCompleted, "gather", 1, event.ToolCompletedData{CallID: "c1", Name: "write_file", OK: true}),
		// A failed call says why, as the printer's ✗ lines do.
		phaseEvent(event.ToolStarted, event.PlannerPhaseID, 1, event.ToolStartedData{CallID: "p1", Name: "submit_plan", Args: []byte(`{}`)}),
		phaseEvent(event.ToolCompleted, event.PlannerPhaseID, 1, event.ToolCompletedData{CallID: "p1", Name: "submit_plan", Error: "invalid plan: phases: a plan needs at least one phase"}),
		phaseEvent(event.VerificationCompleted, "gather", 1, event.VerificationData{Status: "fail", Notes: []string{"fail: s.md: empty"}}),
		phaseEvent(event.PhaseFailed, "gather", 1, event.PhaseData{Status: "failed", Reason: "s.md: empty", WillRetry: true}),
		phaseEvent(event.PhaseCompleted, "gather", 2, event.PhaseData{DurationMS: 1500}),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed", Turns: 4, DurationMS: 2000}),
	} {
		b.Print(e)
	}
	b.Close()
	want := []string{
		"plan: Report (2 phases, .agent/runs/r/mission.json)",
		"  1. gather — Gather [artifact: s.md]",
		"  2. write — Write [programmatic: make check] after gather",
		"▶ gather: attempt 1 started",
		"  gather ✓ write_file s.md",
		"  planner ✗ submit_plan: invalid plan: phases: a plan needs at least one phase",
		"  gather verification failed: s.md: empty",
		"✗ gather attempt 1 failed: s.md: empty (retrying)",
		"✓ gather verified in 1.5s",
	}
	if got := strings.TrimSpace(out.String()); got != strings.Join(want, "\n") {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(errb.String(), "done in 2s · 2 phases · 4 turns") {
		t.Errorf("stderr = %q", errb.String())
	}
	if strings.Contains(out.String()+errb.String(), "\033") {
		t.Error("escape sequences off a terminal")
	}
}

// On a terminal the live list appears once a phase starts and is left in
// place, complete, when the run ends.
func TestBoardLive(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	b := NewBoard(&out, &errb, true)
	plan := `{"objective":"O","phases":[{"id":"one","title":"One","evidence":{"type":"none"}}]}`
	b.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(plan)}))
	time.Sleep(250 * time.Millisecond) // a tick passes: nothing may be drawn before a phase starts
	b.mu.Lock()
	before := out.String()
	b.mu.Unlock()
	if strings.Contains(before, "pending") {
		t.Errorf("list drawn before any phase started: %q", before)
	}
	b.Print(phaseEvent(event.PhaseStarted, "one", 1, event.PhaseData{}))
	b.Print(phaseEvent(event.PhaseCompleted, "one", 1, event.PhaseData{DurationMS: 100}))
	b.Print(event.New(event.RunCompleted, event.RunFinishedData{Status: "completed"}))
	b.Close()
	if !strings.HasSuffix(out.String(), "✓ one              completed  attempt 1    0.1s  \033[K\n") {
		t.Errorf("final list not left on screen: %q", out.String())
	}
}
