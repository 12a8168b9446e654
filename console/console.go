// Package console renders a run's events for people: assistant text as it
// streams, one line per tool call, diagnostics on stderr, and a spinner
// while the model thinks when stderr is a terminal. Scripts use --json
// instead, which bypasses this package.
package console

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"agent/event"
)

// IsTerminal reports whether f is an interactive terminal.
func IsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// Printer renders events. Out gets the assistant's words and tool lines;
// Err gets diagnostics and the spinner. It is safe for concurrent use.
type Printer struct {
	mu      sync.Mutex
	out     io.Writer
	err     io.Writer
	spinner *spinner          // nil when Err is not a terminal
	midLine bool              // Out has text without a trailing newline
	calls   map[string]string // call id → what the call is about
}

// NewPrinter returns a Printer. Pass spin=true only when err is a terminal.
func NewPrinter(out, err io.Writer, spin bool) *Printer {
	p := &Printer{out: out, err: err, calls: map[string]string{}}
	if spin {
		p.spinner = newSpinner(err)
	}
	return p
}

// Print renders one event.
func (p *Printer) Print(e event.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spinner.stop()
	switch e.Type {
	case event.MessageDelta:
		var d event.MessageDeltaData
		if e.Decode(&d) == nil && d.Text != "" {
			fmt.Fprint(p.out, d.Text)
			p.midLine = !strings.HasSuffix(d.Text, "\n")
		}
	case event.MessageCompleted:
		var d event.MessageData
		if e.Decode(&d) != nil {
			return
		}
		if d.Role == "assistant" {
			p.endLine()
			if len(d.ToolCalls) > 0 {
				p.spinner.start("running tools")
			}
			return
		}
		p.spinner.start("waiting for the model")
	case event.ToolStarted:
		var d event.ToolStartedData
		if e.Decode(&d) == nil {
			p.calls[d.CallID] = Summary(d.Name, d.Args)
			p.spinner.start(strings.TrimSpace(d.Name + " " + p.calls[d.CallID]))
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
		fmt.Fprintln(p.out, line)
		p.spinner.start("waiting for the model")
	case event.ArtifactCreated:
		var d event.ArtifactData
		if e.Decode(&d) == nil {
			fmt.Fprintf(p.err, "  wrote %s (%d bytes)\n", d.Path, d.Bytes)
		}
	case event.IterationStarted:
		var d event.IterationData
		if e.Decode(&d) == nil {
			p.endLine()
			fmt.Fprintf(p.err, "── iteration %d of %d ──\n", d.Iteration, d.MaxIterations)
		}
	case event.IterationCompleted:
		var d event.IterationData
		if e.Decode(&d) == nil && !d.Completed {
			p.endLine()
			fmt.Fprintf(p.err, "iteration %d ended: %s\n", d.Iteration, d.Reason)
		}
	case event.Retry:
		var d event.RetryData
		if e.Decode(&d) == nil {
			p.endLine()
			fmt.Fprintf(p.err, "model call failed (attempt %d of %d): %s; retrying in %s\n",
				d.Attempt, d.MaxAttempts, d.Error, time.Duration(d.DelayMS)*time.Millisecond)
		}
	case event.Warning:
		var d event.WarningData
		if e.Decode(&d) == nil {
			p.endLine()
			fmt.Fprintf(p.err, "warning: %s\n", d.Message)
		}
	case event.RunStarted:
		var d event.RunStartedData
		if e.Decode(&d) == nil && d.Resumed {
			fmt.Fprintf(p.err, "resuming run %s\n", e.RunID)
		}
		p.spinner.start("waiting for the model")
	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		p.finish(e)
	}
}

// Close stops the spinner.
func (p *Printer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spinner.stop()
}

func (p *Printer) finish(e event.Event) {
	p.endLine()
	var d event.RunFinishedData
	if e.Decode(&d) != nil {
		return
	}
	tokens := d.Usage.PromptTokens + d.Usage.CompletionTokens
	took := (time.Duration(d.DurationMS) * time.Millisecond).Round(time.Millisecond)
	switch e.Type {
	case event.RunCompleted:
		fmt.Fprintf(p.err, "done in %s · %s · %d tokens · run %s\n", took, plural(d.Turns, "turn"), tokens, e.RunID)
	case event.RunInterrupted:
		fmt.Fprintf(p.err, "interrupted after %s; continue with: agent resume %s\n", took, e.RunID)
	default:
		fmt.Fprintf(p.err, "%s: %s (run %s, %s, exit %d)\n", statusWord(e.Type), detail(d), e.RunID, plural(d.Turns, "turn"), d.ExitCode)
	}
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
		return "cancelled"
	}
	return "failed"
}

func (p *Printer) endLine() {
	if p.midLine {
		fmt.Fprintln(p.out)
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
	keys := []string{"path", "command", "pattern", "to", "channel"}
	if tool == "grep" {
		keys = []string{"pattern"}
	}
	for _, k := range keys {
		if s, ok := m[k].(string); ok && s != "" {
			return clip(s, 80)
		}
	}
	return ""
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
