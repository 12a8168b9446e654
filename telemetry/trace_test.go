package telemetry

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"agent/event"
)

const testRunID = "0b6f2c8e-1d2a-4c3b-9e8f-aabbccddeeff"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ev is an event at t0 + ms, in a phase attempt if phase is not "".
func ev(ms int, typ string, data any, phase ...string) event.Event {
	e := event.New(typ, data)
	e.TS = t0.Add(time.Duration(ms) * time.Millisecond)
	if len(phase) > 0 {
		e.PhaseID, e.Attempt = phase[0], 1
	}
	return e
}

func assistant(durationMS int64, calls ...string) event.MessageData {
	d := event.MessageData{Role: "assistant", Usage: &event.Usage{PromptTokens: 100, CompletionTokens: 7}, DurationMS: durationMS}
	for _, id := range calls {
		d.ToolCalls = append(d.ToolCalls, event.ToolCall{ID: id, Name: "write_file"})
	}
	return d
}

// tree prints each span as "name < parent name", in start order.
func tree(spans []*span) string {
	byID := map[uint64]*span{}
	for _, s := range spans {
		byID[s.id] = s
	}
	var lines []string
	for _, s := range spans {
		line := s.name
		if p, ok := byID[s.parent]; ok {
			line += " < " + p.name
		} else if s.parent != 0 {
			line += " < ?"
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

func named(t *testing.T, spans []*span, name string) *span {
	t.Helper()
	for _, s := range spans {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no span %q in:\n%s", name, tree(spans))
	return nil
}

func attrOf(s *span, key string) any {
	for _, a := range s.attrs {
		if a.key == key {
			return a.value
		}
	}
	return nil
}

// TestTraceOfSingleRun: a run with no iteration events still has one
// iteration; the model call starts its duration before its message; the
// tool call sits under the model call that asked for it; a failed run and
// a failed tool have status error.
func TestTraceOfSingleRun(t *testing.T) {
	t.Parallel()
	tr := NewTrace(testRunID, "sess-1", "run")
	for _, e := range []event.Event{
		ev(0, event.RunStarted, event.RunStartedData{Model: "gpt-test"}),
		ev(5, event.MessageCompleted, event.MessageData{Role: "user", Text: "write it"}),
		ev(10, event.MessageDelta, event.MessageDeltaData{Text: "ok"}),
		ev(900, event.MessageCompleted, assistant(800, "call_1")),
		ev(910, event.ToolStarted, event.ToolStartedData{CallID: "call_1", Name: "write_file"}),
		ev(930, event.ToolCompleted, event.ToolCompletedData{CallID: "call_1", Name: "write_file", OK: false, Error: "disk full\nmore"}),
		ev(1500, event.MessageCompleted, assistant(500)),
		ev(1510, event.RunFailed, event.RunFinishedData{Status: "failed", Reason: "max_turns", Detail: "ran out", ExitCode: 1,
			Usage: event.Usage{PromptTokens: 200, CompletionTokens: 14}}),
	} {
		tr.Observe(e)
	}
	spans := tr.finish()
	want := "run\niteration < run\nchat gpt-test < iteration\nexecute_tool write_file < chat gpt-test\nchat gpt-test < iteration"
	if got := tree(spans); got != want {
		t.Fatalf("spans:\n%s\nwant:\n%s", got, want)
	}
	if hex.EncodeToString(tr.traceID[:]) != strings.ReplaceAll(testRunID, "-", "") {
		t.Errorf("trace id %x is not the run id", tr.traceID)
	}
	run, it, model, tool := spans[0], spans[1], spans[2], spans[3]
	if !run.start.Equal(t0) || !run.end.Equal(t0.Add(1510*time.Millisecond)) || run.status != statusError || run.message != "max_turns: ran out" {
		t.Errorf("run span %v … %v, status %d %q", run.start, run.end, run.status, run.message)
	}
	if attrOf(run, "agent.run.id") != testRunID || attrOf(run, "agent.session.id") != "sess-1" ||
		attrOf(run, "gen_ai.usage.input_tokens") != int64(200) || attrOf(run, "agent.run.status") != "failed" {
		t.Errorf("run attributes %v", run.attrs)
	}
	if !it.start.Equal(t0.Add(5*time.Millisecond)) || !it.end.Equal(run.end) {
		t.Errorf("iteration %v … %v", it.start, it.end)
	}
	if !model.start.Equal(t0.Add(100*time.Millisecond)) || !model.end.Equal(t0.Add(900*time.Millisecond)) || model.kind != kindClient {
		t.Errorf("model call %v … %v kind %d", model.start, model.end, model.kind)
	}
	if attrOf(model, "gen_ai.usage.output_tokens") != int64(7) || attrOf(model, "gen_ai.request.model") != "gpt-test" {
		t.Errorf("model attributes %v", model.attrs)
	}
	if tool.status != statusError || tool.message != "disk full" || attrOf(tool, "agent.tool.outcome") != "error" ||
		attrOf(tool, "gen_ai.tool.name") != "write_file" || tool.end.Sub(tool.start) != 20*time.Millisecond {
		t.Errorf("tool span %+v", tool)
	}
}

// TestTraceOfHarness: planner and phases under the run, iterations (Ralph
// ones too) under their phase, parallel phases with the same call ids kept
// apart, and a tool left running when the run stopped marked unfinished.
func TestTraceOfHarness(t *testing.T) {
	t.Parallel()
	tr := NewTrace(testRunID, "", "harness")
	for _, e := range []event.Event{
		ev(0, event.RunStarted, event.RunStartedData{Model: "m"}),
		ev(1, event.MessageCompleted, event.MessageData{Role: "user"}, event.PlannerPhaseID),
		ev(2, event.MessageCompleted, assistant(1), event.PlannerPhaseID),
		ev(3, event.PlanCreated, event.PlanData{}),
		ev(10, event.PhaseStarted, event.PhaseData{Title: "Build"}, "build"),
		ev(11, event.PhaseStarted, event.PhaseData{Title: "Docs"}, "docs"),
		ev(12, event.IterationStarted, event.IterationData{Iteration: 1}, "build"),
		ev(13, event.MessageCompleted, assistant(1, "call_1"), "build"),
		ev(14, event.MessageCompleted, assistant(1, "call_1"), "docs"),
		ev(15, event.ToolStarted, event.ToolStartedData{CallID: "call_1", Name: "write_file"}, "docs"),
		ev(16, event.ToolStarted, event.ToolStartedData{CallID: "call_1", Name: "write_file"}, "build"),
		ev(17, event.ToolCompleted, event.ToolCompletedData{CallID: "call_1", OK: true}, "build"),
		ev(18, event.IterationCompleted, event.IterationData{Iteration: 1, Completed: true}, "build"),
		ev(19, event.PhaseCompleted, event.PhaseData{Status: "passed"}, "build"),
		ev(30, event.RunInterrupted, event.RunFinishedData{Status: "interrupted"}),
	} {
		tr.Observe(e)
	}
	spans := tr.finish()
	want := strings.Join([]string{
		"run", "plan < run", "iteration < plan", "chat m < iteration",
		"phase build < run", "phase docs < run",
		"iteration < phase build", "chat m < iteration", "iteration < phase docs", "chat m < iteration",
		"execute_tool write_file < chat m", "execute_tool write_file < chat m",
	}, "\n")
	if got := tree(spans); got != want {
		t.Fatalf("spans:\n%s\nwant:\n%s", got, want)
	}
	byID := map[uint64]*span{}
	for _, s := range spans {
		byID[s.id] = s
	}
	docsTool, buildTool := spans[10], spans[11]
	if byID[byID[byID[docsTool.parent].parent].parent].name != "phase docs" || byID[byID[byID[buildTool.parent].parent].parent].name != "phase build" {
		t.Errorf("tool calls with one call id are mixed up across phases")
	}
	if attrOf(buildTool, "agent.tool.outcome") != "ok" || attrOf(docsTool, "agent.tool.outcome") != "unfinished" || docsTool.status != statusError {
		t.Errorf("build tool %v, docs tool %v", buildTool.attrs, docsTool.attrs)
	}
	plan, build, docs := named(t, spans, "plan"), named(t, spans, "phase build"), named(t, spans, "phase docs")
	if !plan.end.Equal(t0.Add(3*time.Millisecond)) || !build.end.Equal(t0.Add(19*time.Millisecond)) || !docs.end.Equal(t0.Add(30*time.Millisecond)) {
		t.Errorf("phase ends: plan %v, build %v, docs %v", plan.end, build.end, docs.end)
	}
	if attrOf(build, "agent.phase.title") != "Build" || attrOf(build, "agent.phase.status") != "passed" || spans[0].status != 0 {
		t.Errorf("build %v; run status %d", build.attrs, spans[0].status)
	}
	for _, s := range spans {
		if s.end.Before(s.start) || s.end.IsZero() {
			t.Errorf("%s ends %v before it starts %v", s.name, s.end, s.start)
		}
	}
}

// TestTraceOfUnendedRun: a drive whose terminal event was never persisted
// still exports, its spans ended at the last event; one with no event
// exports nothing.
func TestTraceOfUnendedRun(t *testing.T) {
	t.Parallel()
	if spans := NewTrace(testRunID, "", "run").finish(); spans != nil {
		t.Errorf("a trace of no events has %d spans", len(spans))
	}
	tr := NewTrace("not-a-uuid", "", "run")
	tr.Observe(ev(0, event.RunStarted, event.RunStartedData{}))
	tr.Observe(ev(40, event.MessageCompleted, event.MessageData{Role: "user"}))
	spans := tr.finish()
	if len(spans) != 2 || !spans[0].end.Equal(t0.Add(40*time.Millisecond)) || !spans[1].end.Equal(spans[0].end) {
		t.Fatalf("spans %s, run ends %v", tree(spans), spans[0].end)
	}
	if tr.traceID == ([16]byte{}) || tr.traceID != NewTrace("not-a-uuid", "", "run").traceID {
		t.Errorf("trace id of a non-UUID run id: %x, not the same each time", tr.traceID)
	}
}
