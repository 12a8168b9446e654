package chat

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/supervisor"
)

// TerminalAsker asks inline on the terminal a run was started from, while
// the other channels stay open (docs/PROTOCOL.md#waits): agent run's and
// agent chat's approvals and questions.
type TerminalAsker struct {
	lines *console.Lines
	out   io.Writer
}

func NewTerminalAsker(in io.Reader, out io.Writer) *TerminalAsker {
	return &TerminalAsker{lines: console.NewLines(in), out: out}
}

// Ask is a supervisor.Asker.
func (t *TerminalAsker) Ask(ctx context.Context, w event.RunWaitingData) (supervisor.Decision, error) {
	d := supervisor.Decision{Who: os.Getenv("USER")}
	var err error
	switch w.Kind {
	case event.WaitApproval:
		var allow bool
		allow, d.Always, d.Text, err = t.lines.AskApproval(ctx, t.out, w)
		d.Decide = map[bool]string{true: supervisor.DecideAllow, false: supervisor.DecideDeny}[allow]
	case event.WaitQuestion:
		d.Decide = supervisor.DecideAnswer
		d.Text, err = t.lines.AskQuestion(ctx, t.out, w)
	default:
		// A time or a signal: nothing to ask; the deadline or another
		// channel resolves it.
		<-ctx.Done()
		err = context.Cause(ctx)
	}
	return d, err
}

// GatewayAsker is what a client does when a gateway's run parks: with a
// TerminalAsker it asks inline and answers with wait.answer, following
// on; another channel's answer (its wait.resolved) ends the question.
// Without one it stops following (exit 6), the run waiting in the gateway.
type GatewayAsker struct {
	ctx    context.Context
	s      *api.Stream
	runID  string
	asker  *TerminalAsker // nil: not on a terminal
	errw   io.Writer
	cancel context.CancelFunc
}

func NewGatewayAsker(ctx context.Context, s *api.Stream, runID string, asker *TerminalAsker, errw io.Writer) *GatewayAsker {
	return &GatewayAsker{ctx: ctx, s: s, runID: runID, asker: asker, errw: errw, cancel: func() {}}
}

// Seen ends the question another channel answered.
func (g *GatewayAsker) Seen(e event.Event) {
	if e.Type == event.WaitResolved {
		g.cancel()
	}
}

// Parked asks, or says to stop following (Stream.Follow's parked).
func (g *GatewayAsker) Parked(w event.RunWaitingData) bool {
	if g.asker == nil {
		return true
	}
	g.cancel()
	var ctx context.Context
	ctx, g.cancel = context.WithCancel(g.ctx)
	go func() {
		d, err := g.asker.Ask(ctx, w)
		if err != nil {
			return
		}
		call, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		if err := g.s.Answer(call, g.runID, w.WaitID, d); err != nil && ctx.Err() == nil {
			fmt.Fprintf(g.errw, "could not answer: %v\n", err)
		}
	}()
	return false
}

// Stop ends a question still asked.
func (g *GatewayAsker) Stop() { g.cancel() }
