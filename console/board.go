package console

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"agent/event"
)

// Board renders a harness run for people. On a terminal it keeps a live
// list of the phases (status, attempt, elapsed time) at the bottom of the
// screen, and while the planner works a line saying so; elsewhere it
// prints one plain line per transition.
type Board struct {
	mu      sync.Mutex
	out     io.Writer
	err     io.Writer
	gateway string // the gateway's address, when the run is its (ViaGateway)
	live    bool
	now     func() time.Time
	phases  []*phaseLine
	byID    map[string]*phaseLine
	drawn   int    // lines of the live list currently on screen
	shown   bool   // the live list appears once a phase has started (not over the plan prompt)
	frozen  bool   // the run ended: the list was drawn for the last time
	sandbox string // " · sandbox MODE" for the summary, from run.started
	ending  bool   // the list is being drawn for the last time
	frame   int
	calls   map[string]string // call id → what the call is about
	waits   map[string]bool   // open waits: a person is asked under the list, which stays still
	// subagents are the task descriptions of the sub-runs shown, by id.
	subagents map[string]string
	stop      chan struct{}
	done      chan struct{}

	planning   bool      // the planner works: its events came, no plan yet
	planSince  time.Time // when its first event was recorded
	planNote   string    // the planner's latest tool call
	planned    bool      // plan.created came
	planAt     time.Time // when the plan was recorded
	firstPhase time.Time // when the first phase.started was recorded
}

type phaseLine struct {
	id, title string
	status    string // pending, running, completed, failed, retrying
	attempt   int
	began     time.Time
	took      time.Duration
	note      string
}

// boardTick is how often the live list is drawn again.
const boardTick = 200 * time.Millisecond

// NewBoard returns a Board; live redraws the phase list in place and
// should be true only when out is a terminal.
func NewBoard(out, err io.Writer, live bool) *Board {
	b := newBoard(out, err, live, time.Now)
	if live {
		b.stop, b.done = make(chan struct{}), make(chan struct{})
		go b.tick()
	}
	return b
}

// newBoard returns a Board that draws only when told (tests), with the
// clock now.
func newBoard(out, err io.Writer, live bool, now func() time.Time) *Board {
	return &Board{out: out, err: err, live: live, now: now, byID: map[string]*phaseLine{}, calls: map[string]string{}, waits: map[string]bool{},
		subagents: map[string]string{}}
}

func (b *Board) tick() {
	defer close(b.done)
	t := time.NewTicker(boardTick)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.step()
		}
	}
}

// step draws the next frame of the live list.
func (b *Board) step() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frame++
	b.redraw()
}

// Close stops the live list, leaving its last state on screen.
func (b *Board) Close() {
	if b.stop != nil {
		close(b.stop)
		<-b.done
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.freeze()
}

// freeze draws the list one last time and leaves it in place; a planning
// line is cleared, not left behind.
func (b *Board) freeze() {
	if b.frozen {
		return
	}
	b.planning, b.ending = false, true
	b.redraw()
	b.drawn = 0
	b.frozen = true
}

// Print renders one event.
// ViaGateway says the run is a gateway's, at addr: how it goes on names it.
func (b *Board) ViaGateway(addr string) { b.gateway = addr }

func (b *Board) Print(e event.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.Subagent != "" {
		b.subagent(e)
		return
	}
	if e.PhaseID == event.PlannerPhaseID && !b.planned && !b.planning && !event.IsTerminal(e.Type) {
		b.startPlanning(e)
	}
	switch e.Type {
	case event.PlanCreated:
		b.planning, b.planned, b.planAt = false, true, e.TS
		b.planCreated(e)
	case event.PhaseStarted:
		b.shown = true
		if b.firstPhase.IsZero() {
			b.firstPhase = e.TS
		}
		if p := b.phase(e.PhaseID); p != nil {
			p.status, p.attempt, p.began, p.note = event.StatusRunning, e.Attempt, e.TS, ""
		}
		if b.live {
			b.redraw() // the list shows it
		} else {
			b.say(b.out, "▶ %s: attempt %d started", e.PhaseID, e.Attempt)
		}
	case event.ToolStarted:
		var d event.ToolStartedData
		if e.Decode(&d) == nil {
			b.calls[d.CallID] = Summary(d.Name, d.Args)
			b.setNote(e.PhaseID, strings.TrimSpace(d.Name+" "+b.calls[d.CallID]))
		}
	case event.ToolCompleted:
		var d event.ToolCompletedData
		if e.Decode(&d) != nil {
			return
		}
		call := strings.TrimSpace(d.Name + " " + b.calls[d.CallID])
		delete(b.calls, d.CallID)
		mark := "✓"
		if !d.OK {
			mark, call = "✗", call+": "+clip(d.Error, 100) // why, as the printer says it
		}
		who := e.PhaseID
		if who == event.PlannerPhaseID {
			who = "planner"
		}
		if !b.live {
			b.say(b.out, "  %s %s %s", who, mark, call)
		} else {
			b.setNote(e.PhaseID, call)
		}
	case event.VerificationCompleted:
		var d event.VerificationData
		if e.Decode(&d) == nil {
			b.verified(e.PhaseID, d)
		}
	case event.PhaseCompleted:
		var d event.PhaseData
		_ = e.Decode(&d)
		took := time.Duration(d.DurationMS) * time.Millisecond
		if p := b.phase(e.PhaseID); p != nil {
			p.status, p.took, p.note = event.StatusCompleted, took, ""
		}
		if b.live {
			b.redraw() // the list shows it
		} else {
			b.say(b.out, "✓ %s verified in %s", e.PhaseID, formatDuration(took))
		}
	case event.PhaseFailed:
		var d event.PhaseData
		_ = e.Decode(&d)
		next := "no attempts left"
		status := event.StatusFailed
		if d.WillRetry {
			next, status = "retrying", "retrying"
		}
		if d.Status == event.StatusCancelled || d.Status == event.StatusInterrupted {
			next, status = "stopped", event.StatusPending
		}
		if p := b.phase(e.PhaseID); p != nil {
			p.status, p.took, p.note = status, time.Duration(d.DurationMS)*time.Millisecond, clip(d.Reason, 60)
		}
		// Printed on a terminal too: the list keeps only the start of the
		// latest reason, and loses it when the next attempt starts.
		b.say(b.out, "✗ %s attempt %d %s: %s (%s)", e.PhaseID, e.Attempt, orDefault(d.Status, event.StatusFailed), clip(d.Reason, 200), next)
	case event.EffectUnknown:
		var d event.EffectUnknownData
		if e.Decode(&d) == nil {
			b.say(b.err, "%s: %s", who(e.PhaseID), unknownEffect(d))
		}
	case event.Retry:
		var d event.RetryData
		if e.Decode(&d) == nil {
			b.say(b.err, "%s: model call failed (attempt %d of %d): %s; retrying in %s", who(e.PhaseID),
				d.Attempt, d.MaxAttempts, d.Error, formatDuration(time.Duration(d.DelayMS)*time.Millisecond))
		}
	case event.Warning:
		var d event.WarningData
		if e.Decode(&d) == nil {
			b.say(b.err, "warning: %s", d.Message)
		}
	case event.RunWaiting:
		var d event.RunWaitingData
		if e.Decode(&d) == nil && !b.waits[d.WaitID] { // a parked harness names its phase's wait again
			if p := b.phase(e.PhaseID); p != nil {
				p.status = event.StatusWaiting
			}
			b.say(b.err, "%s: %s", who(e.PhaseID), WaitLine(d))
			b.hold(d.WaitID)
		}
	case event.WaitResolved:
		var d event.WaitResolvedData
		if e.Decode(&d) == nil {
			delete(b.waits, d.WaitID)
			if p := b.phase(e.PhaseID); p != nil && p.status == event.StatusWaiting {
				p.status = event.StatusRunning
			}
			b.say(b.err, "%s: %s", who(e.PhaseID), strings.TrimSpace(ResolvedLine(d)))
		}
	case event.RunStarted:
		var d event.RunStartedData
		if e.Decode(&d) == nil && d.Resumed {
			b.say(b.err, "resuming run %s", e.RunID)
		}
		b.sandbox = sandboxNote(d)
	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		b.planning = false
		b.finish(e)
	}
}

// subagent shows a sub-run's tool line (the task tool) under its phase,
// prefixed "↳ TASK"; on a terminal, as the phase's note.
func (b *Board) subagent(e event.Event) {
	sub := SubagentLabel(b.subagents, e)
	var d event.ToolCompletedData
	if e.Type != event.ToolCompleted || e.Decode(&d) != nil {
		return
	}
	mark := "✓"
	if !d.OK {
		mark = "✗"
	}
	if b.live {
		b.setNote(e.PhaseID, sub+" "+d.Name)
		return
	}
	b.say(b.out, "  %s %s %s %s", e.PhaseID, sub, mark, d.Name)
}

// startPlanning: the planner's first event. On a terminal a line with its
// elapsed time stays at the bottom until the plan comes; elsewhere one
// line says it.
func (b *Board) startPlanning(e event.Event) {
	b.planning, b.planSince, b.planNote = true, e.TS, ""
	if b.planSince.IsZero() {
		b.planSince = b.now()
	}
	if b.live {
		b.redraw()
	} else {
		b.say(b.out, "planning: a planner splits the task into phases…")
	}
}

// setNote says what a phase, or the planner, is doing now, on the list.
func (b *Board) setNote(phaseID, note string) {
	if !b.live {
		return
	}
	if phaseID == event.PlannerPhaseID {
		b.planNote = note
		return
	}
	if p := b.phase(phaseID); p != nil {
		p.note = note
	}
}

// verified shows a verification: its outcome in a word, and the notes
// that explain it without their repeated label ("fail: x" is said
// "failed: x"). On a terminal a failure is left to the phase.failed that
// follows, which carries the same reasons, and a pass to the list.
func (b *Board) verified(phaseID string, d event.VerificationData) {
	word := map[string]string{"pass": "passed", "fail": "failed", "warn": "passed with warnings"}[d.Status]
	if word == "" {
		word = d.Status
	}
	if d.Status == "fail" {
		if p := b.phase(phaseID); p != nil {
			p.note = "verification failed"
		}
	}
	if b.live && d.Status != "warn" {
		b.redraw()
		return
	}
	b.say(b.out, "  %s verification %s%s", phaseID, word, notesSuffix(d))
}

func (b *Board) planCreated(e event.Event) {
	var d event.PlanData
	if e.Decode(&d) != nil {
		return
	}
	var p struct {
		Objective string `json:"objective"`
		Phases    []struct {
			ID        string   `json:"id"`
			Title     string   `json:"title"`
			DependsOn []string `json:"depends_on"`
			Evidence  struct {
				Type      string   `json:"type"`
				Artifacts []string `json:"artifacts"`
				Receipts  []string `json:"receipts"`
				Command   string   `json:"command"`
			} `json:"evidence"`
		} `json:"phases"`
	}
	if json.Unmarshal(d.Plan, &p) != nil {
		return
	}
	b.phases, b.byID = nil, map[string]*phaseLine{}
	if b.live {
		// A long path would wrap the line on a terminal; the [Y/n] prompt,
		// or with --plan the last line, names mission.json.
		b.say(b.out, "plan: %s (%s)", clip(p.Objective, 60), plural(len(p.Phases), "phase"))
	} else {
		b.say(b.out, "plan: %s (%s, %s)", p.Objective, plural(len(p.Phases), "phase"), d.Path)
	}
	for i, ph := range p.Phases {
		l := &phaseLine{id: ph.ID, title: ph.Title, status: event.StatusPending}
		b.phases = append(b.phases, l)
		b.byID[ph.ID] = l
		ev := ph.Evidence.Type
		switch {
		case len(ph.Evidence.Artifacts) > 0:
			ev += ": " + strings.Join(ph.Evidence.Artifacts, ", ")
		case ph.Evidence.Command != "":
			ev += ": " + ph.Evidence.Command
		case len(ph.Evidence.Receipts) > 0:
			ev += ": " + strings.Join(ph.Evidence.Receipts, ", ")
		}
		deps := ""
		if len(ph.DependsOn) > 0 {
			deps = " after " + strings.Join(ph.DependsOn, ", ")
		}
		b.say(b.out, "  %d. %s — %s [%s]%s", i+1, ph.ID, ph.Title, ev, deps)
	}
}

func notesSuffix(d event.VerificationData) string {
	if d.Status == "pass" || len(d.Notes) == 0 {
		return ""
	}
	var notes []string
	for _, n := range d.Notes {
		if rest, ok := strings.CutPrefix(n, d.Status+": "); ok {
			notes = append(notes, rest)
		}
	}
	if len(notes) == 0 {
		notes = d.Notes
	}
	return ": " + clip(strings.Join(notes, "; "), 200)
}

func (b *Board) phase(id string) *phaseLine {
	if p, ok := b.byID[id]; ok {
		return p
	}
	if id == "" || id == event.PlannerPhaseID {
		return nil
	}
	p := &phaseLine{id: id, status: event.StatusPending}
	b.phases = append(b.phases, p)
	b.byID[id] = p
	return p
}

func (b *Board) finish(e event.Event) {
	var d event.RunFinishedData
	if e.Decode(&d) != nil {
		return
	}
	b.freeze()
	took, waited := b.took(e, d)
	tokens := d.Usage.PromptTokens + d.Usage.CompletionTokens
	switch {
	case e.Type == event.RunCompleted:
		b.say(b.err, "done in %s%s · %s · %s · %d tokens%s · run %s", took, waited, plural(len(b.phases), "phase"), plural(d.Turns, "turn"), tokens, b.sandbox, e.RunID)
	case d.Status == event.StatusPlanned:
		b.say(b.err, "%s", detail(d))
	case e.Type == event.RunInterrupted:
		b.say(b.err, "%s", interrupted(e, d, took+waited, b.gateway))
	default:
		b.say(b.err, "failed: %s", detail(d))
	}
}

// took is how long the run worked, and what it waited for apart.
//
// The run's own duration_ms is authoritative for how long it ran, and
// the board uses it rather than its own clock; but it also counts the
// time a person took to answer the plan's [Y/n] prompt, which is no work
// of the run's. The board cannot see the prompt. It sees when the plan
// was recorded and when the first phase started, both stamped by the run,
// and nothing but that confirmation (and a few milliseconds of
// bookkeeping) happens between them. So the work is duration_ms less that
// gap, and a gap of a second or more is said apart ("done in 40s (+12s
// waiting to start)") rather than hidden. Timing from the
// first phase.started alone would drop the planning, which is work;
// wall-clock time since the board started would count the prompt.
func (b *Board) took(e event.Event, d event.RunFinishedData) (took, waited string) {
	total := time.Duration(d.DurationMS) * time.Millisecond
	if !b.planAt.IsZero() && !b.firstPhase.IsZero() {
		if gap := b.firstPhase.Sub(b.planAt); gap > 0 && gap <= total {
			total -= gap
			if gap >= time.Second {
				waited = fmt.Sprintf(" (+%s waiting to start)", formatDuration(gap))
			}
		}
	}
	return formatDuration(total), waited
}

// say prints a line above the live list.
func (b *Board) say(w io.Writer, format string, args ...any) {
	b.clear()
	fmt.Fprintf(w, format+"\n", args...)
	b.redraw()
}

// clear takes the live list off the screen. It goes back to the start of
// the line first: the terminal's echo of Ctrl-C ("^C") may have moved the
// cursor right, and erasing from there would leave the list's first
// columns (a status glyph) in front of the next line.
func (b *Board) clear() {
	if !b.live || b.drawn == 0 {
		return
	}
	fmt.Fprintf(b.out, "\r\033[%dA\033[J", b.drawn)
	b.drawn = 0
}

// hold leaves the live list on screen as it is, without a spinner frame,
// and draws it no more while a wait is open: the person is asked under
// it, and the answer typed there. A planning line is taken off instead.
func (b *Board) hold(waitID string) {
	if !b.live {
		return
	}
	if !b.planning {
		b.ending = true
		b.redraw()
		b.ending = false
	} else {
		b.clear()
	}
	b.drawn = 0
	b.waits[waitID] = true
}

func (b *Board) redraw() {
	if !b.live || b.frozen || len(b.waits) > 0 {
		return
	}
	b.clear()
	spin := string(frames[b.frame%len(frames)])
	switch {
	case b.planning:
		fmt.Fprintf(b.out, "%s planning %s  %s\033[K\n", spin, formatDuration(b.now().Sub(b.planSince)), clip(b.planNote, 50))
		b.drawn = 1
	case b.shown && len(b.phases) > 0:
		for _, p := range b.phases {
			mark := map[string]string{event.StatusPending: "·", event.StatusCompleted: "✓", event.StatusFailed: "✗", "retrying": "↻", event.StatusWaiting: "⏸"}[p.status]
			if p.status == event.StatusRunning {
				mark = spin
				if b.ending {
					mark = "▶" // no spinner frame left behind
				}
			}
			elapsed := ""
			switch {
			case p.status == event.StatusRunning:
				elapsed = formatDuration(b.now().Sub(p.began))
			case p.took > 0:
				elapsed = formatDuration(p.took)
			}
			attempt := ""
			if p.attempt > 0 {
				attempt = fmt.Sprintf("attempt %d", p.attempt)
			}
			fmt.Fprintf(b.out, "%s %-16s %-10s %-10s %6s  %s\033[K\n", mark, clip(p.id, 16), p.status, attempt, elapsed, clip(p.note, 50))
		}
		b.drawn = len(b.phases)
	}
}

// who names the part of a harness an event is about on its own line.
func who(phaseID string) string {
	if phaseID == event.PlannerPhaseID {
		return "planner"
	}
	return orDefault(phaseID, "harness")
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
