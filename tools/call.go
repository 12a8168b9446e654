package tools

import (
	"context"
	"time"
)

// Call is a running tool call as its tool reaches the loop that runs it:
// to say how far it has come, and to ask a person while it runs (an MCP
// server's progress notifications and elicitations). The loop puts it in
// the call's context (WithCall); a tool run without one has neither.
type Call struct {
	ID   string // the model's id of the call
	Name string // the tool's name as the model calls it
	// Progress reports how far the call has come: total 0 when unknown.
	// The loop shows it and bounds how often it is recorded.
	Progress func(progress, total float64, message string)
	// Ask asks a person q while the call runs and returns the answer;
	// the loop says how, or declines at once when nobody can answer.
	Ask func(ctx context.Context, q Question) (Answer, error)
}

// Question is what a running call asks a person.
type Question struct {
	Server  string   // the MCP server that asks
	Text    string   // the question, self-contained
	Options []string // suggested answers, if the choice is among a few
	// Seq numbers a call's questions from 1, so that a call run again
	// after a crash asks the same wait again.
	Seq int
}

// Answer is a person's answer to a Question, or why there is none.
type Answer struct {
	Text string
	// Declined: a person refused to answer (agent deny), or nobody can
	// answer in this run; Why says which, for the model.
	Declined bool
	// TimedOut: nobody answered before the deadline.
	TimedOut bool
	Why      string
}

type callKey struct{}

// WithCall is ctx carrying the running call c.
func WithCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallOf is the running call ctx carries, or nil.
func CallOf(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// ProgressEvery bounds how often one call's progress is recorded: a
// chatty server cannot flood the run's journal.
const ProgressEvery = time.Second
