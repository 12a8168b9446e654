package telemetry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"agent/event"
)

// A run's trace is made from its events, as they are persisted:
//
//	run                    run.started … the terminal event
//	  phase ID             phase.started … phase.completed/failed (harness)
//	    iteration          iteration.started … iteration.completed
//	      chat MODEL       a model call: message.completed less its duration_ms
//	        execute_tool T tool.started … tool.completed, under the call that asked
//
// A run that is not a Ralph loop has no iteration events: its one
// iteration is opened by its first message, so every model call sits under
// an iteration. So is the planner's (phase "_plan"), which has no
// phase.started. Span names carry the phase, model or tool (bounded sets)
// but never a count. Events come from this process and from its children,
// on the same clock.

// Span kinds and status codes of OTLP.
const (
	kindInternal = 1
	kindClient   = 3

	statusOK    = 1
	statusError = 2
)

// span is one span of a trace. A zero end means it is still open.
type span struct {
	id, parent uint64
	name       string
	kind       int
	start, end time.Time
	attrs      []attr
	status     int
	message    string
}

// attr is a span or resource attribute: its value is a string, an int64
// or a bool.
type attr struct {
	key   string
	value any
}

func (s *span) set(key string, value any) { s.attrs = append(s.attrs, attr{key, value}) }

func (s *span) fail(message string) { s.status, s.message = statusError, message }

// Trace builds the spans of one drive of a run from its events. A resumed
// run is driven again under the same trace id, so its drives are one
// trace. It is safe for concurrent use: a harness's phases run in parallel.
type Trace struct {
	mu      sync.Mutex
	runID   string
	traceID [16]byte
	model   string
	run     *span
	spans   []*span
	last    time.Time // the newest event's time: where open spans end
	// Open spans by scope: "" for the run's own events, else a phase
	// attempt's ("ID#attempt").
	phases     map[string]*span
	iterations map[string]*span
	// By scope and call id: the model call that asked for a tool call,
	// and the tool calls under way.
	askedBy map[string]uint64
	tools   map[string]*span
}

// NewTrace starts the trace of one drive of a run.
func NewTrace(runID, sessionID, kind string) *Trace {
	t := &Trace{
		runID:      runID,
		traceID:    traceID(runID),
		phases:     map[string]*span{},
		iterations: map[string]*span{},
		askedBy:    map[string]uint64{},
		tools:      map[string]*span{},
	}
	t.run = t.open("run", 0, kindInternal, time.Time{})
	t.run.set("agent.run.id", runID)
	if sessionID != "" {
		t.run.set("agent.session.id", sessionID)
	}
	t.run.set("agent.run.kind", kind)
	return t
}

// traceID is the run id's 16 bytes when it is a UUID, as every run id
// is, else a hash of it: the same run always has the same trace.
func traceID(runID string) [16]byte {
	var id [16]byte
	if b, err := hex.DecodeString(strings.ReplaceAll(runID, "-", "")); err == nil && len(b) == len(id) {
		copy(id[:], b)
		return id
	}
	sum := sha256.Sum256([]byte(runID))
	copy(id[:], sum[:])
	return id
}

func (t *Trace) open(name string, parent uint64, kind int, start time.Time) *span {
	id := rand.Uint64()
	for id == 0 {
		id = rand.Uint64()
	}
	s := &span{id: id, parent: parent, name: name, kind: kind, start: start}
	t.spans = append(t.spans, s)
	return s
}

// The data of the events a trace reads, without the texts it does not.
type (
	messageData struct {
		Role       string       `json:"role"`
		Usage      *event.Usage `json:"usage"`
		DurationMS int64        `json:"duration_ms"`
		ToolCalls  []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	}
	toolData struct {
		CallID string `json:"call_id"`
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Error  string `json:"error"`
	}
	phaseData struct {
		Title     string `json:"title"`
		Status    string `json:"status"`
		Reason    string `json:"reason"`
		WillRetry bool   `json:"will_retry"`
	}
)

// Observe adds what a persisted event says to the trace.
func (t *Trace) Observe(e event.Event) {
	if e.Subagent != "" {
		return // a sub-run's, shown in its parent's stream: it has a trace of its own
	}
	switch e.Type {
	case event.MessageDelta, event.Heartbeat:
		return // the bulk of a run's events, and nothing to trace
	}
	if e.TS.IsZero() { // event.New stamps every event; this is for one that was not
		e.TS = time.Now()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.run.start.IsZero() {
		t.run.start = e.TS
	}
	if e.TS.After(t.last) {
		t.last = e.TS
	}
	scope := ""
	if e.PhaseID != "" {
		scope = e.PhaseID + "#" + strconv.Itoa(e.Attempt)
	}
	switch e.Type {
	case event.RunStarted:
		var d event.RunStartedData
		_ = json.Unmarshal(e.Data, &d)
		t.run.start, t.model = e.TS, d.Model
		t.run.set("gen_ai.request.model", d.Model)
		if d.Resumed {
			t.run.set("agent.run.resumed", true)
		}
	case event.PlanCreated:
		// The planner's work ends with the plan it made.
		t.endScope(event.PlannerPhaseID+"#1", e.TS)
	case event.PhaseStarted:
		var d phaseData
		_ = json.Unmarshal(e.Data, &d)
		if ph := t.phase(scope, e); d.Title != "" {
			ph.set("agent.phase.title", d.Title)
		}
	case event.PhaseCompleted, event.PhaseFailed:
		var d phaseData
		_ = json.Unmarshal(e.Data, &d)
		ph := t.phase(scope, e)
		ph.set("agent.phase.status", d.Status)
		if e.Type == event.PhaseFailed {
			ph.fail(d.Reason)
			ph.set("agent.phase.will_retry", d.WillRetry)
		}
		t.endScope(scope, e.TS)
	case event.IterationStarted:
		var d event.IterationData
		_ = json.Unmarshal(e.Data, &d)
		t.endIteration(scope, e.TS)
		it := t.open("iteration", t.parentIn(scope, e), kindInternal, e.TS)
		it.set("agent.iteration", int64(d.Iteration))
		t.iterations[scope] = it
	case event.IterationCompleted:
		var d event.IterationData
		_ = json.Unmarshal(e.Data, &d)
		it := t.iteration(scope, e, e.TS)
		it.set("agent.iteration.completed", d.Completed)
		if d.Reason != "" && !d.Completed {
			it.set("agent.iteration.reason", d.Reason)
		}
		t.endIteration(scope, e.TS)
	case event.MessageCompleted:
		var d messageData
		_ = json.Unmarshal(e.Data, &d)
		start := e.TS.Add(-time.Duration(d.DurationMS) * time.Millisecond)
		it := t.iteration(scope, e, start)
		if d.Role != "assistant" {
			return
		}
		name := "chat"
		if t.model != "" {
			name += " " + t.model
		}
		call := t.open(name, it.id, kindClient, start)
		call.end = e.TS
		call.set("gen_ai.operation.name", "chat")
		call.set("gen_ai.request.model", t.model)
		if d.Usage != nil {
			call.set("gen_ai.usage.input_tokens", int64(d.Usage.PromptTokens))
			call.set("gen_ai.usage.output_tokens", int64(d.Usage.CompletionTokens))
		}
		for _, c := range d.ToolCalls {
			t.askedBy[scope+"\x00"+c.ID] = call.id
		}
	case event.ToolStarted:
		var d toolData
		_ = json.Unmarshal(e.Data, &d)
		parent, ok := t.askedBy[scope+"\x00"+d.CallID]
		if !ok { // a call a resumed run finishes: its model call was in an earlier drive
			parent = t.iteration(scope, e, e.TS).id
		}
		tool := t.open("execute_tool "+d.Name, parent, kindInternal, e.TS)
		tool.set("gen_ai.operation.name", "execute_tool")
		tool.set("gen_ai.tool.name", d.Name)
		tool.set("gen_ai.tool.call.id", d.CallID)
		t.tools[scope+"\x00"+d.CallID] = tool
	case event.ToolCompleted:
		var d toolData
		_ = json.Unmarshal(e.Data, &d)
		key := scope + "\x00" + d.CallID
		tool, ok := t.tools[key]
		if !ok {
			return // its tool.started was in an earlier drive
		}
		delete(t.tools, key)
		tool.end = e.TS
		if d.OK {
			tool.set("agent.tool.outcome", "ok")
			tool.status = statusOK
		} else {
			tool.set("agent.tool.outcome", "error")
			tool.fail(firstLine(d.Error))
		}
	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		var d event.RunFinishedData
		_ = json.Unmarshal(e.Data, &d)
		t.run.set("agent.run.status", d.Status)
		t.run.set("agent.run.reason", d.Reason)
		t.run.set("agent.run.exit_code", int64(d.ExitCode))
		t.run.set("agent.run.turns", int64(d.Turns))
		t.run.set("gen_ai.usage.input_tokens", int64(d.Usage.PromptTokens))
		t.run.set("gen_ai.usage.output_tokens", int64(d.Usage.CompletionTokens))
		if d.Status == event.StatusFailed {
			t.run.fail(firstLine(d.Reason + ": " + d.Detail))
		}
		t.endAll(e.TS)
	}
}

// phase returns the open span of a phase attempt, opening it (the
// planner has no phase.started) at e.
func (t *Trace) phase(scope string, e event.Event) *span {
	if ph, ok := t.phases[scope]; ok {
		return ph
	}
	name := "phase " + e.PhaseID
	if e.PhaseID == event.PlannerPhaseID {
		name = "plan"
	}
	ph := t.open(name, t.run.id, kindInternal, e.TS)
	ph.set("agent.phase.id", e.PhaseID)
	ph.set("agent.phase.attempt", int64(e.Attempt))
	t.phases[scope] = ph
	return ph
}

// parentIn is the span a scope's iterations sit under.
func (t *Trace) parentIn(scope string, e event.Event) uint64 {
	if scope == "" {
		return t.run.id
	}
	return t.phase(scope, e).id
}

// iteration returns the scope's open iteration, opening it at start if
// the run has no iteration events.
func (t *Trace) iteration(scope string, e event.Event, start time.Time) *span {
	if it, ok := t.iterations[scope]; ok {
		if start.Before(it.start) {
			it.start = start
		}
		return it
	}
	it := t.open("iteration", t.parentIn(scope, e), kindInternal, start)
	t.iterations[scope] = it
	return it
}

func (t *Trace) endIteration(scope string, at time.Time) {
	if it, ok := t.iterations[scope]; ok {
		it.end = at
		delete(t.iterations, scope)
	}
}

// endScope ends a phase attempt, with what is still open in it.
func (t *Trace) endScope(scope string, at time.Time) {
	prefix := scope + "\x00"
	for key, tool := range t.tools {
		if strings.HasPrefix(key, prefix) {
			unfinished(tool, at)
			delete(t.tools, key)
		}
	}
	t.endIteration(scope, at)
	if ph, ok := t.phases[scope]; ok {
		ph.end = at
		delete(t.phases, scope)
	}
}

// endAll ends every open span at the run's end.
func (t *Trace) endAll(at time.Time) {
	for key, tool := range t.tools {
		unfinished(tool, at)
		delete(t.tools, key)
	}
	for scope := range t.iterations {
		t.endIteration(scope, at)
	}
	for scope := range t.phases {
		t.endScope(scope, at)
	}
	if t.run.end.IsZero() {
		t.run.end = at
	}
}

// unfinished ends a tool call the run stopped during.
func unfinished(tool *span, at time.Time) {
	tool.end = at
	tool.set("agent.tool.outcome", "unfinished")
	tool.fail("the run stopped before the call returned")
}

// finish ends what is still open (a run whose terminal event could not be
// persisted) at its last event, and returns the spans.
func (t *Trace) finish() []*span {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.run.start.IsZero() {
		return nil // not one event: nothing to say
	}
	t.endAll(t.last)
	return t.spans
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
