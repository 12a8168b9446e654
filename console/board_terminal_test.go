package console

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"agent/event"
)

// termBoard is a live Board on a fake terminal with a fake clock; it
// draws a frame only when the test calls step.
func termBoard(c *clock) (*Board, *screen) {
	scr := &screen{}
	return newBoard(scr, scr, true, c.now), scr
}

// at is an event recorded at t.
func at(e event.Event, t time.Time) event.Event {
	e.TS = t
	return e
}

const onePhasePlan = `{"objective":"O","phases":[{"id":"one","title":"One","evidence":{"type":"none"}}]}`

func planner(typ string, data any) event.Event {
	return phaseEvent(typ, event.PlannerPhaseID, 1, data)
}

// On a terminal a line says the planner is at work, with its elapsed time
// and what it does, until the plan comes; then it is gone, not left over
// the plan or the [Y/n] prompt.
func TestBoardPlanningLive(t *testing.T) {
	t.Parallel()
	c := newClock()
	b, scr := termBoard(c)
	b.Print(at(event.New(event.RunStarted, event.RunStartedData{Prompt: "x"}), c.now()))
	b.Print(at(planner(event.MessageCompleted, event.MessageData{Role: "user", Text: "plan this"}), c.now()))
	c.add(3200 * time.Millisecond)
	b.step()
	if line := scr.cursorLine(); line != "" || !strings.Contains(scr.text(), " planning 3.2s") {
		t.Fatalf("no planning line after 3.2s: %q", scr.text())
	}
	b.Print(planner(event.ToolStarted, event.ToolStartedData{CallID: "p1", Name: "read_file", Args: []byte(`{"path":"README.md"}`)}))
	c.add(time.Second)
	b.step()
	if got := scr.text(); !strings.HasSuffix(got, " planning 4.2s  read_file README.md") || strings.Count(got, "planning") != 1 {
		t.Fatalf("planning line: %q", got)
	}
	b.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(onePhasePlan), Path: ".agent/runs/r/mission.json"}))
	b.step()
	if got := scr.text(); got != "plan: O (1 phase)\n  1. one — One [none]" {
		t.Errorf("after the plan:\n%s", got)
	}
	b.Close()
}

// Off a terminal, one line says planning started, however many events the
// planner sends.
func TestBoardPlanningPlain(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	b := NewBoard(&out, &errb, false)
	b.Print(event.New(event.RunStarted, event.RunStartedData{Prompt: "x"}))
	b.Print(planner(event.MessageCompleted, event.MessageData{Role: "user", Text: "plan this"}))
	b.Print(planner(event.MessageDelta, event.MessageDeltaData{Text: "Looking"}))
	b.Print(planner(event.ToolStarted, event.ToolStartedData{CallID: "p1", Name: "read_file", Args: []byte(`{"path":"README.md"}`)}))
	b.Print(planner(event.ToolCompleted, event.ToolCompletedData{CallID: "p1", Name: "read_file", OK: true}))
	b.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(onePhasePlan), Path: "m.json"}))
	b.Close()
	want := "planning: a planner splits the task into phases…\n" +
		"  planner ✓ read_file README.md\n" +
		"plan: O (1 phase, m.json)\n" +
		"  1. one — One [none]\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A plan given with --plan-file has no planner: no planning line.
func TestBoardNoPlanningWithoutPlanner(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	b := NewBoard(&out, &errb, false)
	b.Print(event.New(event.RunStarted, event.RunStartedData{Prompt: "x"}))
	b.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(onePhasePlan), Path: "m.json"}))
	b.Close()
	if strings.Contains(out.String(), "planning") {
		t.Errorf("stdout: %q", out.String())
	}
}

// Ctrl-C: the terminal echoes "^C" under the live list, moving the
// cursor right. Taking the list off the screen must start from the
// beginning of the line, or the list's first columns (a spinner frame)
// stay in front of the next line.
func TestBoardCtrlCLeavesNoGlyph(t *testing.T) {
	t.Parallel()
	c := newClock()
	b, scr := termBoard(c)
	b.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(onePhasePlan)}))
	b.Print(at(phaseEvent(event.PhaseStarted, "one", 1, event.PhaseData{}), c.now()))
	c.add(2 * time.Second)
	b.step()
	scr.echo("^C") // the events of the interrupt come before the next tick
	b.Print(phaseEvent(event.PhaseFailed, "one", 1, event.PhaseData{Status: "cancelled", Reason: "interrupted by the user", DurationMS: 2100}))
	b.Print(event.New(event.RunInterrupted, event.RunFinishedData{Status: "interrupted", DurationMS: 2500, ExitCode: 130}))
	b.Close()
	got := scr.text()
	for _, l := range strings.Split(got, "\n") {
		if strings.ContainsAny(l[:min(len(l), 4)], string(frames)) || strings.Contains(l, "^C") {
			t.Errorf("stray glyph in %q; screen:\n%s", l, got)
		}
	}
	want := "plan: O (1 phase)\n" +
		"  1. one — One [none]\n" +
		"✗ one attempt 1 cancelled: interrupted by the user (stopped)\n" +
		"· one              pending    attempt 1    2.1s  interrupted by the user\n" +
		"interrupted after 2.5s; continue with: agent resume"
	if got != want {
		t.Errorf("screen:\n%s\nwant:\n%s", got, want)
	}
}

// On a terminal the list is the record of transitions: a phase starting
// or completing is not also printed as a line above it, and a passed
// verification is not either; what the list cannot hold (why an attempt
// failed) still is.
func TestBoardLiveTransitionsOnce(t *testing.T) {
	t.Parallel()
	c := newClock()
	b, scr := termBoard(c)
	b.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(onePhasePlan)}))
	for _, e := range []event.Event{
		at(phaseEvent(event.PhaseStarted, "one", 1, event.PhaseData{}), c.now()),
		phaseEvent(event.VerificationCompleted, "one", 1, event.VerificationData{Status: "fail", Notes: []string{"pass: a.md exists", "fail: a.md: empty"}}),
		phaseEvent(event.PhaseFailed, "one", 1, event.PhaseData{Status: "failed", Reason: "a.md: empty", WillRetry: true, DurationMS: 1000}),
		at(phaseEvent(event.PhaseStarted, "one", 2, event.PhaseData{}), c.now()),
		phaseEvent(event.VerificationCompleted, "one", 2, event.VerificationData{Status: "pass", Notes: []string{"pass: a.md exists"}}),
		phaseEvent(event.PhaseCompleted, "one", 2, event.PhaseData{Status: "passed", DurationMS: 1500}),
		event.New(event.RunCompleted, event.RunFinishedData{Status: "completed", Turns: 2, DurationMS: 3000}),
	} {
		b.Print(e)
		b.step()
	}
	b.Close()
	want := "plan: O (1 phase)\n" +
		"  1. one — One [none]\n" +
		"✗ one attempt 1 failed: a.md: empty (retrying)\n" +
		"✓ one              completed  attempt 2    1.5s\n" +
		"done in 3s · 1 phase · 2 turns · 0 tokens · run"
	if got := scr.text(); got != want {
		t.Errorf("screen:\n%s\nwant:\n%s", got, want)
	}
}

// Verification lines say the outcome in a word and each note once.
func TestBoardVerificationWords(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	b := NewBoard(&out, &errb, false)
	b.Print(phaseEvent(event.VerificationCompleted, "a", 1, event.VerificationData{Status: "fail", Notes: []string{"pass: x exists", "fail: x: empty", "fail: y: missing"}}))
	b.Print(phaseEvent(event.VerificationCompleted, "a", 2, event.VerificationData{Status: "warn", Notes: []string{"pass: x exists", "warn: x: short"}}))
	b.Print(phaseEvent(event.VerificationCompleted, "a", 3, event.VerificationData{Status: "pass", Notes: []string{"pass: x exists"}}))
	b.Close()
	want := "  a verification failed: x: empty; y: missing\n" +
		"  a verification passed with warnings: x: short\n" +
		"  a verification passed\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
}

// Durations have one format on the board: the lines, the list and the
// total (100ms is "0.1s" everywhere, never "100ms" beside "0s").
func TestBoardOneDurationFormat(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	b := NewBoard(&out, &errb, false)
	b.Print(phaseEvent(event.PhaseCompleted, "a", 1, event.PhaseData{DurationMS: 100}))
	b.Print(phaseEvent(event.PhaseCompleted, "b", 1, event.PhaseData{DurationMS: 40}))
	b.Print(event.New(event.Retry, event.RetryData{Attempt: 1, MaxAttempts: 2, DelayMS: 250, Error: "429"}))
	b.Print(event.New(event.RunCompleted, event.RunFinishedData{Status: "completed", DurationMS: 61400}))
	b.Close()
	if want := "✓ a verified in 0.1s\n✓ b verified in 0s\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if !strings.Contains(errb.String(), "retrying in 0.3s") || !strings.Contains(errb.String(), "done in 1m1s ·") {
		t.Errorf("stderr %q", errb.String())
	}

	c := newClock()
	lb, scr := termBoard(c)
	lb.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(onePhasePlan)}))
	lb.Print(at(phaseEvent(event.PhaseStarted, "one", 1, event.PhaseData{}), c.now()))
	c.add(1234 * time.Millisecond)
	lb.step()
	if got := scr.text(); !strings.HasSuffix(got, "one              running    attempt 1    1.2s") {
		t.Errorf("running phase: %q", got)
	}
	lb.Close()
	if got := scr.text(); !strings.HasSuffix(got, "▶ one              running    attempt 1    1.2s") {
		t.Errorf("frozen list keeps a spinner frame: %q", got)
	}
}

// On a terminal the plan's line carries no path, which would wrap it
// mid-path, and a long objective is clipped.
func TestBoardPlanLineLive(t *testing.T) {
	t.Parallel()
	c := newClock()
	b, scr := termBoard(c)
	objective := strings.Repeat("a long objective ", 10)
	plan := `{"objective":"` + objective + `","phases":[{"id":"one","title":"One","evidence":{"type":"none"}}]}`
	b.Print(event.New(event.PlanCreated, event.PlanData{Plan: []byte(plan), Path: ".agent/runs/0190a8b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b/mission.json"}))
	b.Close()
	first := strings.Split(scr.text(), "\n")[0]
	if strings.Contains(first, "mission.json") || len([]rune(first)) > 80 {
		t.Errorf("plan line %q (%d runes)", first, len([]rune(first)))
	}
}

// The total is the run's own duration_ms less the wait between the plan
// and its first phase (the [Y/n] prompt), which is said apart.
func TestBoardTotalLeavesOutThePrompt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, live := range []bool{false, true} {
		var out, errb bytes.Buffer
		b := newBoard(&out, &errb, live, func() time.Time { return t0 })
		b.Print(at(event.New(event.RunStarted, event.RunStartedData{}), t0))
		b.Print(at(event.New(event.PlanCreated, event.PlanData{Plan: []byte(onePhasePlan)}), t0.Add(2*time.Second)))
		b.Print(at(phaseEvent(event.PhaseStarted, "one", 1, event.PhaseData{}), t0.Add(32*time.Second)))
		b.Print(at(phaseEvent(event.PhaseCompleted, "one", 1, event.PhaseData{DurationMS: 5000}), t0.Add(37*time.Second)))
		b.Print(at(event.New(event.RunCompleted, event.RunFinishedData{Status: "completed", Turns: 1, DurationMS: 37100}), t0.Add(37100*time.Millisecond)))
		b.Close()
		if want := "done in 7.1s (+30s waiting to start) · 1 phase · 1 turn · 0 tokens · run \n"; errb.String() != want {
			t.Errorf("live %v: stderr %q, want %q", live, errb.String(), want)
		}
	}
}
