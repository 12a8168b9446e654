// Package console renders a run's events for people: assistant text as it
// streams, one line per tool call, diagnostics on stderr, and, when stderr
// is a terminal, a spinner for as long as the run waits on the model or a
// tool; scripts get the events as JSON lines instead. It also says, for
// people, what the other commands answer: runs, sessions, jobs, reports.
package console

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"agent/event"
)

// IsTerminal reports whether f (a reader or a writer) is a file that is
// an interactive terminal.
func IsTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// Display shows a run's events as they are persisted.
type Display interface {
	Print(event.Event)
	Close()
}

// NewDisplay is how a run's events are shown: for scripts (asJSON), every
// event as one JSON line on out; for people, a harness's phase board on
// out, redrawn in place when out is a terminal, or else the printer, with
// its spinner on errw when errw is a terminal.
func NewDisplay(out, errw io.Writer, harness, asJSON bool) Display {
	switch {
	case asJSON:
		return jsonDisplay{enc: event.NewEncoder(out)}
	case harness:
		return NewBoard(out, errw, IsTerminal(out))
	}
	return NewPrinter(out, errw, IsTerminal(errw))
}

// jsonDisplay writes each event as one JSON line, and nothing else.
type jsonDisplay struct{ enc *event.Encoder }

func (d jsonDisplay) Print(e event.Event) { _ = d.enc.Encode(e) }
func (d jsonDisplay) Close()              {}

// Printer renders events. Out gets the assistant's words and tool lines;
// Err gets diagnostics and the spinner. It is safe for concurrent use.
type Printer struct {
	mu      sync.Mutex
	out     io.Writer
	err     io.Writer
	gateway string // the gateway's address, when the run is its (ViaGateway)
	now     func() time.Time
	spinner *spinner          // nil when Err is not a terminal
	midLine bool              // Out has text without a trailing newline
	calls   map[string]string // call id → what the call is about
	prompts bool              // show the user's prompts (attach replays a session)
	// subagents are the task descriptions of the sub-runs shown, by id.
	subagents map[string]string

	// What the run waits for now, worked out from the event stream: the
	// spinner shows it on a terminal. Empty while the model's text streams
	// (the text is the sign of life) and once the run has ended.
	wait       string
	waitSince  time.Time
	unanswered map[string]bool // tool calls of the last assistant message without a result
	sandbox    string          // " · sandbox MODE" for the summary, from run.started
	// structured: the run has an output schema, so Out gets only its
	// answer as JSON, at the end, for a program to read; the text the
	// model streams goes to Err.
	structured bool
}

// Waits the spinner names.
const (
	waitModel = "waiting for the model"
	waitTools = "running tools"
)

// NewPrinter returns a Printer. Pass spin=true only when err is a terminal.
// ViaGateway says the run is a gateway's, at addr: how it goes on names it.
func (p *Printer) ViaGateway(addr string) { p.gateway = addr }

func NewPrinter(out, err io.Writer, spin bool) *Printer {
	p := &Printer{out: out, err: err, now: time.Now, calls: map[string]string{}, unanswered: map[string]bool{}, subagents: map[string]string{}}
	if spin {
		p.spinner = newSpinner(err)
	}
	return p
}

// ShowPrompts makes the Printer show each prompt a person gave (a
// message.completed of the user, outside harness phases) as "> prompt"
// lines before the answer. A session replayed by attach needs it: without
// them the answers have no questions. A run started here does not: its
// user just typed the prompt.
func (p *Printer) ShowPrompts(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prompts = on
}

// Note prints a line for people on Err, between events.
func (p *Printer) Note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	p.printf(p.err, format+"\n", args...)
	p.keepSpinning()
}

// Print renders one event.
func (p *Printer) Print(e event.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.render(e)
	p.keepSpinning()
}

func (p *Printer) render(e event.Event) {
	if e.Subagent != "" {
		p.renderSubagent(e)
		return
	}
	switch e.Type {
	case event.MessageDelta:
		var d event.MessageDeltaData
		if e.Decode(&d) == nil && d.Text != "" {
			p.printf(p.text(), "%s", d.Text)
			p.midLine = !strings.HasSuffix(d.Text, "\n")
			p.waitFor("")
		}
	case event.MessageCompleted:
		var d event.MessageData
		if e.Decode(&d) != nil {
			return
		}
		if d.Role == "assistant" {
			p.endLine()
			clear(p.unanswered)
			for _, c := range d.ToolCalls {
				p.unanswered[c.ID] = true
			}
			if len(d.ToolCalls) > 0 {
				p.waitFor(waitTools)
			} else {
				p.waitFor("")
			}
			return
		}
		if p.prompts && e.PhaseID == "" {
			p.prompt(d.Text)
		}
		p.waitFor(waitModel)
	case event.ToolStarted:
		var d event.ToolStartedData
		if e.Decode(&d) == nil {
			p.calls[d.CallID] = Summary(d.Name, d.Args)
			p.waitFor(strings.TrimSpace(d.Name + " " + p.calls[d.CallID]))
		}
	case event.ToolProgress:
		// On the call's line, which keeps its clock: how far it has come,
		// before what the call is about, which a narrow terminal cuts.
		var d event.ToolProgressData
		if e.Decode(&d) == nil && p.unanswered[d.CallID] {
			p.wait = d.Name + " " + ProgressText(d)
			if about, room := p.calls[d.CallID], progressLine-len([]rune(p.wait)); about != "" && room > 10 {
				p.wait += " · " + clip(about, room)
			}
		}
	case event.ToolCompleted:
		var d event.ToolCompletedData
		if e.Decode(&d) != nil {
			return
		}
		p.endLine()
		line := "✓ " + d.Name
		if about := p.calls[d.CallID]; about != "" {
			line += " " + about
		}
		delete(p.calls, d.CallID)
		if !d.OK {
			line = "✗" + line[len("✓"):] + ": " + clip(d.Error, 100)
		}
		p.printf(p.text(), "%s\n", line)
		delete(p.unanswered, d.CallID)
		if len(p.unanswered) > 0 {
			p.waitFor(waitTools)
		} else {
			p.waitFor(waitModel)
		}
	case event.ArtifactCreated:
		var d event.ArtifactData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "  wrote %s (%d bytes)\n", d.Path, d.Bytes)
		}
	case event.RunWaiting:
		var d event.RunWaitingData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "%s\n", WaitLine(d))
			p.waitFor("")
		}
	case event.WaitResolved:
		var d event.WaitResolvedData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "%s\n", ResolvedLine(d))
		}
	case event.IterationStarted:
		var d event.IterationData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "── iteration %d of %d ──\n", d.Iteration, d.MaxIterations)
		}
	case event.IterationCompleted:
		var d event.IterationData
		if e.Decode(&d) == nil && !d.Completed {
			p.endLine()
			p.printf(p.err, "iteration %d ended: %s\n", d.Iteration, d.Reason)
		}
	case event.Retry:
		var d event.RetryData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "model call failed (attempt %d of %d): %s; retrying in %s\n",
				d.Attempt, d.MaxAttempts, d.Error, formatDuration(time.Duration(d.DelayMS)*time.Millisecond))
		}
	case event.Warning:
		var d event.WarningData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "warning: %s\n", d.Message)
		}
	case event.ContextCompacted:
		var d event.ContextCompactedData
		if e.Decode(&d) == nil {
			p.endLine()
			why := "to fit the context window"
			if d.Trigger == event.CompactAsked {
				why = "as asked (/compact)"
			}
			p.printf(p.err, "  compacted the conversation %s: about %d → %d tokens\n", why, d.TokensBefore, d.TokensAfter)
		}
	case event.HookCompleted:
		var d event.HookCompletedData
		if e.Decode(&d) == nil && d.Decision != "" && d.Decision != "allow" && d.Decision != "ask" { // ask: run.waiting says it
			p.endLine()
			p.printf(p.err, "%s\n", HookLine(d))
		}
	case event.EffectUnknown:
		var d event.EffectUnknownData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "warning: %s\n", unknownEffect(d))
		}
	case event.RunStarted:
		var d event.RunStartedData
		if e.Decode(&d) == nil && d.Resumed {
			p.endLine()
			p.printf(p.err, "resuming run %s\n", e.RunID)
		}
		p.sandbox = sandboxNote(d)
		p.structured = d.OutputSchema
		clear(p.unanswered)
		p.waitFor(waitModel)
	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		p.waitFor("")
		p.finish(e)
	}
	// Anything else (checkpoint.created, receipt.recorded, learnings,
	// heartbeats…) changes nothing the run waits for.
}

// HookLine says what a hook decided (hook.completed).
func HookLine(d event.HookCompletedData) string {
	line := fmt.Sprintf("  %s hook: %s", d.Event, d.Decision)
	if d.Reason != "" {
		line += ": " + clip(strings.ReplaceAll(strings.TrimSpace(d.Reason), "\n", " "), 200)
	}
	return line
}

// renderSubagent shows an event of a sub-run (the task tool) under its
// task: its tool lines, files and warnings, each prefixed "↳ TASK".
// The parent's own task line says when it ends.
func (p *Printer) renderSubagent(e event.Event) {
	sub := SubagentLabel(p.subagents, e)
	switch e.Type {
	case event.RunStarted:
		var d event.RunStartedData
		if e.Decode(&d) == nil && d.Resumed {
			p.endLine()
			p.printf(p.err, "  %s resuming (run %s)\n", sub, e.Subagent)
		}
	case event.ToolStarted:
		var d event.ToolStartedData
		if e.Decode(&d) == nil {
			p.calls[e.Subagent+"/"+d.CallID] = Summary(d.Name, d.Args)
		}
	case event.ToolCompleted:
		var d event.ToolCompletedData
		if e.Decode(&d) != nil {
			return
		}
		key := e.Subagent + "/" + d.CallID
		line := strings.TrimSpace("✓ " + d.Name + " " + p.calls[key])
		delete(p.calls, key)
		if !d.OK {
			line = "✗" + line[len("✓"):] + ": " + clip(d.Error, 100)
		}
		p.endLine()
		p.printf(p.out, "  %s %s\n", sub, line)
	case event.ArtifactCreated:
		var d event.ArtifactData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "  %s wrote %s (%d bytes)\n", sub, d.Path, d.Bytes)
		}
	case event.Warning:
		var d event.WarningData
		if e.Decode(&d) == nil {
			p.endLine()
			p.printf(p.err, "  %s warning: %s\n", sub, d.Message)
		}
	}
}

// SubagentLabel is how an event of a sub-run is prefixed, "↳ TASK": the
// task's description, learnt from the sub-run's run.started (kept in
// labels), or else the sub-run's short id.
func SubagentLabel(labels map[string]string, e event.Event) string {
	var d event.RunStartedData
	if e.Type == event.RunStarted && e.Decode(&d) == nil && d.Task != "" {
		labels[e.Subagent] = clip(d.Task, 40)
	}
	if l, ok := labels[e.Subagent]; ok {
		return "↳ " + l
	}
	return "↳ " + ShortID(e.Subagent)
}

// progressLine is how long a call's line with its progress grows at most:
// the spinner adds its frame and clock, within a terminal's 80 columns.
const progressLine = 66

// ProgressText is a call's progress for people: "3/5 indexing".
func ProgressText(d event.ToolProgressData) string {
	n := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	text := n(d.Progress)
	if d.Total > 0 {
		text += "/" + n(d.Total)
	}
	if d.Message != "" {
		text += " " + clip(d.Message, 80)
	}
	return text
}

// unknownEffect says that a side effect's outcome was lost, and what
// follows from it.
func unknownEffect(d event.EffectUnknownData) string {
	return fmt.Sprintf("side effect %s may or may not have happened (%s): it is not sent again unless the run is resumed with --resend-unknown",
		d.Key, clip(d.Error, 200))
}

// promptLines is how many lines of a prompt are shown.
const promptLines = 8

// prompt shows a user's prompt as "> " lines.
func (p *Printer) prompt(text string) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) > promptLines {
		lines = append(lines[:promptLines], "…")
	}
	p.endLine()
	for _, l := range lines {
		p.printf(p.text(), "%s\n", strings.TrimRight("> "+l, " \t\r"))
	}
}

// waitFor records what the run waits for from now on; the count starts
// again only when that changes.
func (p *Printer) waitFor(what string) {
	if what != p.wait {
		p.wait, p.waitSince = what, p.now()
	}
}

// keepSpinning shows the current wait, or clears the spinner when there
// is none. Streamed text without its newline yet is never drawn over.
func (p *Printer) keepSpinning() {
	if p.wait == "" || p.midLine {
		p.spinner.hide()
		return
	}
	p.spinner.show(p.wait, p.waitSince)
}

// text is where the model's words and the tool lines go: Out, unless Out
// is for the run's structured answer alone.
func (p *Printer) text() io.Writer {
	if p.structured {
		return p.err
	}
	return p.out
}

// printf clears the spinner, then writes.
func (p *Printer) printf(w io.Writer, format string, args ...any) {
	p.spinner.hide()
	fmt.Fprintf(w, format, args...)
}

// Close stops the spinner.
func (p *Printer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spinner.hide()
}

func (p *Printer) finish(e event.Event) {
	p.endLine()
	if p.spinner != nil {
		// On a terminal the line may hold the echo of Ctrl-C ("^C").
		p.printf(p.err, "\r\033[K")
	}
	var d event.RunFinishedData
	if e.Decode(&d) != nil {
		return
	}
	tokens := d.Usage.PromptTokens + d.Usage.CompletionTokens
	took := formatDuration(time.Duration(d.DurationMS) * time.Millisecond)
	switch e.Type {
	case event.RunCompleted:
		if len(d.Output) > 0 {
			p.printf(p.out, "%s\n", d.Output)
		}
		p.printf(p.err, "done in %s · %s · %d tokens%s · run %s\n", took, plural(d.Turns, "turn"), tokens, p.sandbox, e.RunID)
	case event.RunInterrupted:
		p.printf(p.err, "%s\n", interrupted(e, d, took, p.gateway))
	default:
		p.printf(p.err, "%s: %s (run %s, %s, exit %d)\n", statusWord(e.Type), detail(d), e.RunID, plural(d.Turns, "turn"), d.ExitCode)
	}
}

// sandboxNote is the summary's word on the sandbox the run's commands
// ran in (README.md#the-sandbox), "" when run.started does not say.
func sandboxNote(d event.RunStartedData) string {
	switch {
	case d.Sandbox == "":
		return ""
	case d.Sandbox == "off":
		return " · sandbox off"
	case d.Network:
		return " · sandbox " + d.Sandbox + " with network"
	}
	return " · sandbox " + d.Sandbox
}

// gatewayDrained is the detail of a run.interrupted the gateway records
// when it stops (its drain): the gateway resumes such a run itself when
// it starts again. It is the gateway's reasonDrained (gateway/runs.go);
// console does not import gateway, and TestTerminalGatewayDrain checks
// that the two still agree.
const gatewayDrained = "gateway stopped; resumable"

// interrupted says how an interrupted run goes on: the gateway resumes a
// run its drain interrupted; any other is continued with agent resume.
func interrupted(e event.Event, d event.RunFinishedData, took, gateway string) string {
	if d.Detail == gatewayDrained {
		s := fmt.Sprintf("interrupted after %s: the gateway stopped; it resumes run %s when it starts again", took, e.RunID)
		if e.SessionID != "" {
			s += "; follow it with: agent attach " + e.SessionID
		}
		return s
	}
	if d.Reason == event.ReasonRateLimited {
		at := d.ResumeAfter
		if t, err := time.Parse(time.RFC3339, d.ResumeAfter); err == nil {
			at = t.Local().Format("15:04:05")
		}
		return fmt.Sprintf("paused after %s: the provider rate-limits this key until %s; continue then with: agent resume %s (a gateway resumes its runs by itself)",
			took, at, e.RunID)
	}
	if gateway != "" {
		// It ran in a gateway, which must continue it.
		return fmt.Sprintf("interrupted after %s; continue with: agent resume %s --gateway %s", took, e.RunID, gateway)
	}
	return fmt.Sprintf("interrupted after %s; continue with: agent resume %s", took, e.RunID)
}

// detail says why a run ended: its sentence for people, else its reason.
func detail(d event.RunFinishedData) string {
	if d.Detail != "" {
		return d.Detail
	}
	return d.Reason
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func statusWord(t string) string {
	if t == event.RunCancelled {
		return event.StatusCancelled
	}
	return event.StatusFailed
}

func (p *Printer) endLine() {
	if p.midLine {
		p.printf(p.text(), "\n")
		p.midLine = false
	}
}

// Summary gives the one argument that identifies a tool call for people:
// the path, the command or the pattern.
func Summary(tool string, args json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(args, &m) != nil {
		return ""
	}
	keys := []string{"path", "command", "pattern", "to", "channel", "description"}
	if tool == "grep" {
		keys = []string{"pattern"}
	}
	for _, k := range keys {
		if s, ok := m[k].(string); ok && s != "" {
			return clip(s, 80)
		}
	}
	// An MCP server's tool (mcp__SERVER__TOOL): its simple arguments as k=v.
	if !strings.Contains(tool, "__") {
		return ""
	}
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch v := m[k].(type) {
		case string:
			pairs = append(pairs, k+"="+v)
		case float64, bool:
			pairs = append(pairs, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return clip(strings.Join(pairs, " "), 80)
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// WaitLine says what a run waits for, until when (run.waiting), e.g.
// `⏸ waiting for approval: bash git push origin main (rule bash(git push*)) until 2026-11-27T08:00:00Z`.
func WaitLine(d event.RunWaitingData) string {
	var what string
	switch d.Kind {
	case event.WaitApproval:
		what = strings.TrimSpace(fmt.Sprintf("approval: %s %s", d.Tool, Summary(d.Tool, d.Args))) + " (rule " + d.Rule + ")"
	case event.WaitQuestion:
		what = "an answer: " + d.Question
		if d.Server != "" {
			what = fmt.Sprintf("an answer to MCP server %q: %s", d.Server, d.Question)
		}
		if len(d.Options) > 0 {
			what += " [" + strings.Join(d.Options, " / ") + "]"
		}
	case event.WaitSignal:
		what = "signal " + d.Name
	default:
		what = "a time"
		if d.Reason != "" {
			what += " (" + d.Reason + ")"
		}
	}
	return fmt.Sprintf("⏸ waiting for %s until %s", what, d.Until)
}

// ResolvedLine says how a wait was resolved (wait.resolved).
func ResolvedLine(d event.WaitResolvedData) string {
	via := d.Via
	if d.Who != "" {
		via += ", " + d.Who
	}
	line := fmt.Sprintf("  %s (%s)", strings.ReplaceAll(d.Outcome, "_", " "), via)
	switch {
	case d.Outcome == event.WaitDenied && d.Reason != "":
		line += ": " + d.Reason
	case d.Outcome == event.WaitAnswered:
		line += ": " + clip(d.Answer, 100)
	case d.Always:
		line += ", always for this rule"
	}
	mark := "✓"
	if d.Outcome == event.WaitDenied || d.Outcome == event.WaitTimedOut {
		mark = "✗"
	}
	return mark + line
}

// ReadPrompt is a command's prompt: its arguments joined, or stdin for
// "-", or for no arguments when stdin is not a terminal; "" if empty.
func ReadPrompt(args []string, in io.Reader) (string, error) {
	if len(args) == 1 && args[0] == "-" || len(args) == 0 && !IsTerminal(in) {
		b, err := io.ReadAll(io.LimitReader(in, 1<<20))
		if err != nil {
			return "", fmt.Errorf("read the prompt from stdin: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return strings.TrimSpace(strings.Join(args, " ")), nil
}
