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
// screen; elsewhere it prints one plain line per transition.
type Board struct {
	mu     sync.Mutex
	out    io.Writer
	err    io.Writer
	live   bool
	phases []*phaseLine
	byID   map[string]*phaseLine
	drawn  int  // lines of the live list currently on screen
	shown  bool // the live list appears once a phase has started (not over the plan prompt)
	frozen bool // the run ended: the list was drawn for the last time
	frame  int
	calls  map[string]string // call id → what the call is about
	stop   chan struct{}
	done   chan struct{}
}

type phaseLine struct {
	id, title string
	status    string // pending, running, verifying, completed, failed, retrying
	attempt   int
	began     time.Time
	took      time.Duration
	note      string
}

// NewBoard returns a Board; live redraws the phase list in place and
// should be true only when out is a terminal.
func NewBoard(out, err io.Writer, live bool) *Board {
	b := &Board{out: out, err: err, live: live, byID: map[string]*phaseLine{}, calls: map[string]string{}}
	if live {
		b.stop, b.done = make(chan struct{}), make(chan struct{})
		go b.tick()
	}
	return b
}

func (b *Board) tick() {
	defer close(b.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.mu.Lock()
			b.frame++
			b.redraw()
			b.mu.Unlock()
		}
	}
}

// Close stops the live list, leaving its last state on screen.
func (b *Board) Close() {
	if b.live {
		close(b.stop)
		<-b.done
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.freeze()
}

// freeze draws the list one last time and leaves it in place.
func (b *Board) freeze() {
	if b.frozen {
		return
	}
	b.redraw()
	b.drawn = 0
	b.frozen = true
}

// Print renders one event.
func (b *Board) Print(e event.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e.Type {
	case event.PlanCreated:
		b.planCreated(e)
	case event.PhaseStarted:
		b.shown = true
		if p := b.phase(e.PhaseID); p != nil {
			p.status, p.attempt, p.began, p.note = "running", e.Attempt, e.TS, ""
			b.say(b.out, "▶ %s: attempt %d started", e.PhaseID, e.Attempt)
		}
	case event.ToolStarted:
		var d event.ToolStartedData
		if e.Decode(&d) == nil {
			b.calls[d.CallID] = Summary(d.Name, d.Args)
		}
	case event.ToolCompleted:
		var d event.ToolCompletedData
		if e.Decode(&d) != nil {
			return
		}
		about := b.calls[d.CallID]
		delete(b.calls, d.CallID)
		mark := "✓"
		if !d.OK {
			mark = "✗"
		}
		who := e.PhaseID
		if who == "_plan" {
			who = "planner"
		}
		if !b.live {
			b.say(b.out, "  %s %s %s %s", who, mark, d.Name, about)
		} else if p := b.phase(e.PhaseID); p != nil {
			p.note = strings.TrimSpace(d.Name + " " + about)
		}
	case event.VerificationCompleted:
		var d event.VerificationData
		if e.Decode(&d) == nil {
			if p := b.phase(e.PhaseID); p != nil && d.Status == "fail" {
				p.note = "verification failed"
			}
			b.say(b.out, "  %s verification %s%s", e.PhaseID, d.Status, notesSuffix(d))
		}
	case event.PhaseCompleted:
		var d event.PhaseData
		_ = e.Decode(&d)
		if p := b.phase(e.PhaseID); p != nil {
			p.status, p.took, p.note = "completed", time.Duration(d.DurationMS)*time.Millisecond, ""
		}
		b.say(b.out, "✓ %s verified in %s", e.PhaseID, (time.Duration(d.DurationMS) * time.Millisecond).Round(100*time.Millisecond))
	case event.PhaseFailed:
		var d event.PhaseData
		_ = e.Decode(&d)
		next := "no attempts left"
		status := "failed"
		if d.WillRetry {
			next, status = "retrying", "retrying"
		}
		if d.Status == "cancelled" || d.Status == "interrupted" {
			next, status = "stopped", "pending"
		}
		if p := b.phase(e.PhaseID); p != nil {
			p.status, p.took, p.note = status, time.Duration(d.DurationMS)*time.Millisecond, clip(d.Reason, 60)
		}
		b.say(b.out, "✗ %s attempt %d %s: %s (%s)", e.PhaseID, e.Attempt, orDefault(d.Status, "failed"), clip(d.Reason, 200), next)
	case event.Retry:
		var d event.RetryData
		if e.Decode(&d) == nil {
			b.say(b.err, "%s: model call failed (attempt %d of %d): %s; retrying in %s", orDefault(e.PhaseID, "harness"),
				d.Attempt, d.MaxAttempts, d.Error, time.Duration(d.DelayMS)*time.Millisecond)
		}
	case event.Warning:
		var d event.WarningData
		if e.Decode(&d) == nil {
			b.say(b.err, "warning: %s", d.Message)
		}
	case event.RunStarted:
		var d event.RunStartedData
		if e.Decode(&d) == nil && d.Resumed {
			b.say(b.err, "resuming run %s", e.RunID)
		}
	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		b.finish(e)
	}
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
	b.say(b.out, "plan: %s (%s, %s)", p.Objective, plural(len(p.Phases), "phase"), d.Path)
	for i, ph := range p.Phases {
		l := &phaseLine{id: ph.ID, title: ph.Title, status: "pending"}
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
	return ": " + clip(strings.Join(d.Notes, "; "), 200)
}

func (b *Board) phase(id string) *phaseLine {
	if p, ok := b.byID[id]; ok {
		return p
	}
	if id == "" || id == "_plan" {
		return nil
	}
	p := &phaseLine{id: id, status: "pending"}
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
	took := (time.Duration(d.DurationMS) * time.Millisecond).Round(time.Millisecond)
	tokens := d.Usage.PromptTokens + d.Usage.CompletionTokens
	switch {
	case e.Type == event.RunCompleted:
		b.say(b.err, "done in %s · %d phases · %s · %d tokens · run %s", took, len(b.phases), plural(d.Turns, "turn"), tokens, e.RunID)
	case d.Status == event.StatusPlanned:
		b.say(b.err, "%s", detail(d))
	case e.Type == event.RunInterrupted:
		b.say(b.err, "interrupted after %s; continue with: agent resume %s", took, e.RunID)
	default:
		b.say(b.err, "failed: %s", detail(d))
	}
}

// say prints a line above the live list.
func (b *Board) say(w io.Writer, format string, args ...any) {
	b.clear()
	fmt.Fprintf(w, format+"\n", args...)
	b.redraw()
}

func (b *Board) clear() {
	if !b.live || b.drawn == 0 {
		return
	}
	fmt.Fprintf(b.out, "\033[%dA\033[J", b.drawn)
	b.drawn = 0
}

func (b *Board) redraw() {
	if !b.live || !b.shown || b.frozen || len(b.phases) == 0 {
		return
	}
	b.clear()
	for _, p := range b.phases {
		mark := map[string]string{"pending": "·", "completed": "✓", "failed": "✗", "retrying": "↻"}[p.status]
		if p.status == "running" {
			mark = string(frames[b.frame%len(frames)])
		}
		elapsed := ""
		switch {
		case p.status == "running":
			elapsed = time.Since(p.began).Round(time.Second).String()
		case p.took > 0:
			elapsed = p.took.Round(100 * time.Millisecond).String()
		}
		attempt := ""
		if p.attempt > 0 {
			attempt = fmt.Sprintf("attempt %d", p.attempt)
		}
		fmt.Fprintf(b.out, "%s %-16s %-10s %-10s %6s  %s\033[K\n", mark, clip(p.id, 16), p.status, attempt, elapsed, clip(p.note, 50))
	}
	b.drawn = len(b.phases)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
