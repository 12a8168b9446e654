package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"agent/event"
	"agent/llm"
	"agent/mcp"
	"agent/orchestrator"
	"agent/plan"
	"agent/sandbox"
	"agent/schema"
	"agent/store"
)

// Stop is why a run was stopped from outside: the cause its context is
// cancelled with. Front-ends make one with Interrupt, Cancel or Timeout.
type Stop struct {
	Reason string // event.ReasonInterrupted, ReasonCancelled, ReasonTimeout or ReasonLeaseLost
	Detail string
}

func (s *Stop) Error() string { return s.Detail }

// Interrupt stops a run so that it can be resumed: Ctrl-C, run.cancel
// with mode interrupt, a gateway that stops. An empty detail says what
// Ctrl-C says, wherever the run is.
func Interrupt(detail string) error {
	if detail == "" {
		detail = "interrupted; resume to continue"
	}
	return &Stop{Reason: event.ReasonInterrupted, Detail: detail}
}

// Cancel ends a run for good.
func Cancel(detail string) error { return &Stop{Reason: event.ReasonCancelled, Detail: detail} }

// CancelledByClient is how run.cancel ends a run for good, whether the
// gateway or a worker drives it.
var CancelledByClient = Cancel("cancelled by a client")

// Timeout stops a run that ran for longer than it may.
func Timeout(d time.Duration) error {
	return &Stop{Reason: event.ReasonTimeout, Detail: fmt.Sprintf("timed out after %s", d)}
}

// errLeaseLost stops a run another process took over.
var errLeaseLost = &Stop{Reason: event.ReasonLeaseLost, Detail: "lost the run lease to another process"}

// Outcome is how the driving of a run ended, before it is said as the
// run's terminal event.
type Outcome struct {
	// Report is how the loop, the child or the harness said it ended; nil
	// if it never did (a crash, a failure before it began).
	Report *event.RunnerResultData
	// Err is what stopped the run otherwise.
	Err error
	// Cause is why the run's context ended, if it did.
	Cause error
	// Schema is the run's output schema, if it has one: a completed
	// run's answer must satisfy it, whatever the loop that gave it said.
	Schema *schema.Schema
}

// childError is a child that ended without a runner.result.
type childError struct {
	reason string // event.ReasonCrashed or event.ReasonTimeout
	detail string
}

func (e *childError) Error() string { return e.detail }

// Ending says how a run ended as its terminal event: the type, and the
// data's status, result, reason, detail and exit code. It is the one place
// that does, for every front-end: a run ends with the same event and exit
// code whether it ran in this process, as a harness, in the gateway or on
// a worker. The caller adds the totals and the duration.
//
// The loop's own end decides when it completed, or failed on its own. A
// stop from outside decides otherwise; then the error.
func Ending(o Outcome) (string, event.RunFinishedData) {
	var fin event.RunFinishedData
	var stop *Stop
	stopped := errors.As(o.Cause, &stop)
	r := o.Report
	switch {
	case r != nil && (r.Status == event.StatusCompleted || r.Status == event.StatusFailed && !stopped):
		fin = event.RunFinishedData{Result: r.Output, Turns: r.Turns, Usage: r.Usage, Reason: r.Reason, Detail: r.Detail, ResumeAfter: r.ResumeAfter}
		if r.Status == event.StatusCompleted {
			fin.Reason = event.ReasonCompleted
			if out, problem := structured(o.Schema, r.Output); problem != "" {
				fin.Reason, fin.Detail = event.ReasonSchema, problem
			} else {
				fin.Output = out
			}
		} else if fin.Reason == "" || fin.Reason == event.ReasonCompleted {
			fin.Reason = event.ReasonError
		}
	case stopped:
		fin.Reason, fin.Detail = stop.Reason, stop.Detail
		if r != nil {
			fin.Result, fin.Turns, fin.Usage = r.Output, r.Turns, r.Usage
		}
	case o.Err != nil:
		fin.Reason, fin.Detail = errorReason(o.Err), o.Err.Error()
		fin.ResumeAfter = ResumeAfter(o.Err)
	case r != nil:
		// A child that stopped itself: cancelled by a signal not ours.
		fin = event.RunFinishedData{Result: r.Output, Turns: r.Turns, Usage: r.Usage, Reason: r.Reason, Detail: r.Detail}
	default:
		fin.Reason, fin.Detail = event.ReasonError, "the run ended without saying how"
	}
	if fin.Detail == "" && fin.Reason != event.ReasonCompleted {
		fin.Detail = fin.Reason
	}
	var typ string
	typ, fin.Status = terminal(fin.Reason)
	fin.ExitCode = exitCode(fin.Reason)
	return typ, fin
}

// structured is a completed answer as the output schema asks for it: the
// JSON value (nil without a schema), or what is wrong with it.
func structured(s *schema.Schema, answer string) (out json.RawMessage, problem string) {
	if s == nil {
		return nil, ""
	}
	out, err := s.Check(answer)
	if err != nil {
		return nil, err.Error()
	}
	return out, ""
}

// errorReason is the reason word of an error that stopped a run.
func errorReason(err error) string {
	var (
		invalid  *plan.Error
		planning *orchestrator.PlanError
		provider *llm.Error
		child    *childError
		unusable *store.UnusableError
		server   *mcp.StartError
		confine  *sandbox.UnsupportedError
	)
	switch {
	case errors.As(err, &unusable), errors.As(err, &server), errors.As(err, &confine):
		return event.ReasonEnvironment
	case errors.As(err, &invalid):
		return event.ReasonInvalidPlan
	case errors.As(err, new(*mcp.UnknownToolError)):
		return event.ReasonInvalidOptions
	case errors.As(err, &planning):
		if planning.Stop != "" {
			return planning.Stop
		}
		return event.ReasonPlanning
	case errors.As(err, &provider) && provider.Kind == llm.KindRateLimit:
		return event.ReasonRateLimited
	case errors.As(err, &provider):
		return event.ReasonProvider
	case errors.As(err, &child):
		return child.reason
	}
	return event.ReasonError
}

// ResumeAfter is when a run stopped by a rate limit may go on (RFC
// 3339), "" for any other error.
func ResumeAfter(err error) string {
	var (
		provider *llm.Error
		planning *orchestrator.PlanError
	)
	switch {
	case errors.As(err, &planning):
		return planning.ResumeAfter
	case errors.As(err, &provider) && provider.Kind == llm.KindRateLimit:
		return provider.ResumeAt(time.Now())
	}
	return ""
}

// terminal is the event type and status a run ends with, by reason.
func terminal(reason string) (typ, status string) {
	switch reason {
	case event.ReasonCompleted:
		return event.RunCompleted, event.StatusCompleted
	case event.ReasonInterrupted, event.ReasonLeaseLost, event.ReasonRateLimited:
		return event.RunInterrupted, event.StatusInterrupted
	case event.ReasonPlanned:
		return event.RunInterrupted, event.StatusPlanned
	case event.ReasonCancelled:
		return event.RunCancelled, event.StatusCancelled
	}
	return event.RunFailed, event.StatusFailed
}

// exitCode is the exit code of docs/PROTOCOL.md#how-a-run-ends a run that ended for reason
// gives.
func exitCode(reason string) int {
	switch reason {
	case event.ReasonCompleted, event.ReasonPlanned:
		return 0
	case event.ReasonInvalidPlan, event.ReasonInvalidOptions:
		return 2
	case event.ReasonProvider, event.ReasonRateLimited:
		return 3
	case event.ReasonLeaseLost:
		return 4
	case event.ReasonEnvironment:
		return 5
	case event.ReasonWaiting:
		return 6
	case event.ReasonInterrupted, event.ReasonCancelled:
		return 130
	}
	return 1
}

// Crashed is the error of a run whose process died under it and that is
// not resumed: the run fails with reason crashed.
func Crashed(detail string) error { return &childError{reason: event.ReasonCrashed, detail: detail} }
