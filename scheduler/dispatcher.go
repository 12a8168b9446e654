package scheduler

import (
	"context"
	"encoding/json"
	"time"
)

// Dispatcher turns a tick into a normal run; the gateway implements it.
type Dispatcher interface {
	// Start starts a run for the job's tick and returns its run id. ctx
	// bounds only the call: the run ends by itself, or through Cancel.
	// The run must use job.Policy.Tools as its allowlist (tick.Tools).
	//
	// done delivers the run's Result and is closed when the run has ENDED
	// AND its process is gone, so a retry never overlaps an attempt that
	// timed out but is still alive. Closing it without a Result counts as
	// a failed run.
	//
	// A run that waits for a person or a time (docs/PROTOCOL.md#waits) has
	// not ended: before its Result, done may deliver a Result with Status
	// event.StatusWaiting when it parks (it holds no process), and one with
	// event.StatusRunning when it goes on. Closed without a Result while
	// the run waits (the gateway stops), it leaves the run waiting, for the
	// next engine to reattach.
	Start(ctx context.Context, job Job, tick Tick) (runID string, done <-chan Result, err error)
	// Cancel asks a run to stop; its done channel closes once it has.
	Cancel(runID string)
}

// Tick is one attempt of one scheduled time of a job.
type Tick struct {
	JobRunID     string    // the job_runs row of this attempt
	ScheduledFor time.Time // in the job's zone; with the job id it names the tick
	Attempt      int       // 1, then 2, 3… for retries
	MaxAttempts  int
	Manual       bool          // started by RunNow
	Prompt       string        // the job's prompt_template rendered for this tick
	Tools        []string      // the allowlist; empty means the default tools
	Timeout      time.Duration // the engine cancels the run after this
	Sandbox      string        // the run's sandbox mode; "" is the default
	Network      bool
	MaxTokens    int             // the run's budget; 0: none
	MaxCost      float64         // in USD; 0: none
	Ask          []string        // the run's approval rules
	OutputSchema json.RawMessage // the JSON Schema the run's answer must satisfy; nil: none
}

// Result is how a run ended: event.StatusCompleted, event.StatusFailed
// or event.StatusCancelled; or, before that, that it waits
// (event.StatusWaiting) or goes on (event.StatusRunning).
type Result struct {
	Status string
	Err    string // why it failed or was cancelled
}

// Reattacher may be implemented by a Dispatcher whose runs outlive the
// engine: the gateway resumes runs a dead gateway left running. On Start
// the engine offers it every job run the previous engine recorded as
// running; for a run it hands back (ok), the engine watches done as that
// attempt (timeout, overlap, retries) instead of recording the attempt
// as interrupted.
type Reattacher interface {
	Reattach(runID string) (done <-chan Result, ok bool)
}
