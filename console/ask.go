package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"agent/event"
	"agent/store"
)

// Lines reads a terminal's lines for the life of the process, one
// goroutine for all: a question another channel answered leaves its
// pending read to the next question (docs/PROTOCOL.md#waits).
type Lines struct {
	in    io.Reader
	once  sync.Once
	lines chan string
	next  func(context.Context) (string, error) // LinesFrom's
}

func NewLines(in io.Reader) *Lines { return &Lines{in: in, lines: make(chan string)} }

// LinesFrom reads each line with next: a line editor's, which must stop
// reading when ctx is done (agent chat's).
func LinesFrom(next func(context.Context) (string, error)) *Lines { return &Lines{next: next} }

// Next is the next line, trimmed, or ctx's cause, or io.EOF.
func (l *Lines) Next(ctx context.Context) (string, error) {
	if l.next != nil {
		line, err := l.next(ctx)
		return strings.TrimSpace(line), err
	}
	l.once.Do(func() {
		go func() {
			sc := bufio.NewScanner(l.in)
			for sc.Scan() {
				l.lines <- sc.Text()
			}
			close(l.lines)
		}()
	})
	select {
	case <-ctx.Done():
		return "", context.Cause(ctx)
	case line, ok := <-l.lines:
		if !ok {
			return "", io.EOF
		}
		return strings.TrimSpace(line), nil
	}
}

// AskApproval asks on out whether the call w waits for may run: allow,
// allow the rule always, or deny with an optional reason.
func (l *Lines) AskApproval(ctx context.Context, out io.Writer, w event.RunWaitingData) (allow, always bool, reason string, err error) {
	for {
		fmt.Fprintf(out, "Allow %s %q? [y]es [n]o [a]lways (rule %s) ", w.Tool, Summary(w.Tool, w.Args), w.Rule)
		line, err := l.Next(ctx)
		if err != nil {
			return false, false, "", err
		}
		switch strings.ToLower(line) {
		case "y", "yes":
			return true, false, "", nil
		case "a", "always":
			return true, true, "", nil
		case "n", "no":
			fmt.Fprint(out, "Why (for the model; Enter to skip)? ")
			reason, err := l.Next(ctx)
			return false, false, reason, err
		}
	}
}

// AskQuestion asks w's question on out and returns the answer.
func (l *Lines) AskQuestion(ctx context.Context, out io.Writer, w event.RunWaitingData) (string, error) {
	fmt.Fprintf(out, "? %s\n", w.Question)
	if len(w.Options) > 0 {
		fmt.Fprintf(out, "  (%s)\n", strings.Join(w.Options, " / "))
	}
	for {
		fmt.Fprint(out, "> ")
		line, err := l.Next(ctx)
		if err != nil || line != "" {
			return line, err
		}
	}
}

// PrintWaits is `agent waiting`: each open wait, and how to answer it.
func PrintWaits(out io.Writer, ws []store.Wait, how func(runID string, w event.RunWaitingData) string) {
	if len(ws) == 0 {
		fmt.Fprintln(out, "no run is waiting")
		return
	}
	for _, w := range ws {
		fmt.Fprintf(out, "%s  %s\n    %s\n", ShortID(w.RunID), strings.TrimPrefix(WaitLine(w.Waiting), "⏸ "), how(ShortID(w.RunID), w.Waiting))
	}
}
