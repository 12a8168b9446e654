package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"agent/event"
	"agent/llm"
	"agent/tools"
)

// What a running call asks of the loop (tools.Call): its progress, and a
// person's answer while it runs (an MCP server's elicitation,
// README.md#mcp-tool-servers).

// MaxCallQuestion bounds how long a question asked while a call runs
// waits, whatever the run's ask timeout: the call and its server wait
// with it, in this process, which no parked run can do.
const MaxCallQuestion = 10 * time.Minute

// callHooks is the loop's side of one running call.
type callHooks struct {
	l    *loop
	ctx  context.Context
	call llm.ToolCall

	mu   sync.Mutex
	last time.Time // when its progress was last recorded
	done bool      // the call has its result: nothing more is recorded
}

// running is the call as its tool reaches the loop, and a func that ends
// it once the call has returned.
func (l *loop) running(ctx context.Context, call llm.ToolCall) (*tools.Call, func()) {
	h := &callHooks{l: l, ctx: ctx, call: call}
	end := func() {
		h.mu.Lock()
		h.done = true
		h.mu.Unlock()
	}
	return &tools.Call{ID: call.ID, Name: call.Name, Progress: h.progress, Ask: h.ask}, end
}

// progress records tool.progress, at most once per tools.ProgressEvery:
// a server that reports every millisecond costs the journal a line a
// second. Its error is the sink's, which stops the loop at its next event.
func (h *callHooks) progress(progress, total float64, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.done || !h.last.IsZero() && now.Sub(h.last) < tools.ProgressEvery {
		return
	}
	h.last = now
	_ = h.l.emit(h.ctx, event.New(event.ToolProgress, event.ToolProgressData{
		CallID: h.call.ID, Name: h.call.Name, Progress: progress, Total: total, Message: message,
	}))
}

// ask asks a person q while the call runs, as a question wait of the run
// (docs/PROTOCOL.md#waits): inline on a terminal and through every other
// channel (the Waiter), or through the other channels alone (Hold: this
// process's store, or a child's parent), for at most MaxCallQuestion. It cannot park: the call's server lives only
// as long as this process. So when nobody can answer (the run does not
// ask a person, or this process cannot wait for an answer) it declines
// at once, and says so in a warning.
func (h *callHooks) ask(ctx context.Context, q tools.Question) (tools.Answer, error) {
	l := h.l
	why := ""
	switch {
	case !l.cfg.AskHuman:
		why = "nobody can answer in this run (it does not ask a person: --ask-human, or a terminal)"
	case l.cfg.Waiter == nil && l.cfg.Hold == nil:
		why = "nothing waits for an answer while the call runs here (a harness phase, whose waits park)"
	}
	if why != "" {
		msg := fmt.Sprintf("MCP server %q asked a question while %s ran; declined: %s", q.Server, h.call.Name, why)
		if err := l.emit(ctx, event.New(event.Warning, event.WarningData{Message: msg})); err != nil {
			return tools.Answer{}, err
		}
		return tools.Answer{Declined: true, Why: why}, nil
	}
	w := event.RunWaitingData{
		WaitID: l.waitID(fmt.Sprintf("question/%s/%d", l.process, q.Seq), h.call.ID), Kind: event.WaitQuestion,
		OnTimeout: event.OnTimeoutContinue, Until: l.deadline(time.Time{}, min(l.askTimeout(), MaxCallQuestion)),
		CallID: h.call.ID, Tool: h.call.Name, Args: argsJSON(h.call.Arguments),
		Question: q.Text, Options: q.Options, Server: q.Server,
	}
	// Hold too when the one asked here is gone (an editor that left):
	// the other channels may still answer.
	res, w, err := l.awaitWith(ctx, w, l.cfg.Waiter, l.cfg.Hold)
	if err != nil {
		return tools.Answer{}, err
	}
	switch res.Outcome {
	case event.WaitAnswered:
		return tools.Answer{Text: res.Answer}, nil
	case event.WaitDenied:
		return tools.Answer{Declined: true, Why: denial(res, w)}, nil
	}
	return tools.Answer{TimedOut: true, Why: fmt.Sprintf("nobody answered before %s", w.Until)}, nil
}

// processNonce tells this process's questions from an earlier one's: a
// question asked while a call ran cannot outlive the process, so a call
// run again after a crash asks anew.
func processNonce() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
