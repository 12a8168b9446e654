package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"agent/adapter"
	"agent/approval"
	"agent/event"
	"agent/hooks"
	"agent/llm"
	"agent/tools"
)

// Defaults of waits (docs/PROTOCOL.md#waits).
const (
	DefaultAskTimeout = 24 * time.Hour
	DefaultMaxWait    = 24 * time.Hour
)

// ErrParked ends a loop that waits for a person or a time this process
// does not wait for: the run's last event is its run.waiting, and it goes
// on, where it stopped, once the wait is resolved.
var ErrParked = errors.New("the run waits; it goes on once the wait is resolved")

// WaitFailedError ends a run whose wait timed out with on_timeout fail.
type WaitFailedError struct{ Wait event.RunWaitingData }

func (e *WaitFailedError) Error() string {
	return fmt.Sprintf("nobody resolved the %s wait %s before %s, and it fails the run on timeout", e.Wait.Kind, e.Wait.WaitID, e.Wait.Until)
}

// Waiter waits where the process that drives the run can: a terminal
// that asks inline while the other channels stay open. Wait returns the
// wait's resolution, already stored as its one answer, or ErrParked.
type Waiter interface {
	Wait(ctx context.Context, w event.RunWaitingData) (event.WaitResolvedData, error)
}

// approve asks for a call an approval rule names, or a PreToolUse hook
// asks for (pre), before it starts; a hook's allow skips the rules. It
// returns the result to record instead of running the call (a denial),
// nil to run it, or ErrParked.
func (l *loop) approve(ctx context.Context, call llm.ToolCall, pre decided) (*tools.Result, error) {
	rule, ok := l.cfg.Approvals.Match(approval.Call{Tool: call.Name, Args: call.Arguments, Effect: l.cfg.Tools.IsEffect(call.Name)})
	switch {
	case pre.decision == hooks.Ask:
		rule = approval.Rule{Text: "PreToolUse hook"}
		if why := pre.reason(); why != "" {
			rule.Text += ": " + why
		}
	case pre.decision == hooks.Allow, !ok, l.always[rule.Text]:
		return nil, nil
	}
	onTimeout := l.cfg.AskOnTimeout
	if onTimeout == "" {
		onTimeout = event.OnTimeoutDeny
	}
	w := event.RunWaitingData{
		WaitID: l.waitID("approval", call.ID), Kind: event.WaitApproval, OnTimeout: onTimeout,
		Until:  l.deadline(time.Time{}, l.askTimeout()),
		CallID: call.ID, Tool: call.Name, Args: argsJSON(call.Arguments), Rule: rule.Text,
	}
	asked := w
	res, w, err := l.await(ctx, w)
	if err != nil {
		return nil, err
	}
	if w.CallID != asked.CallID || w.Tool != asked.Tool || canonicalJSON(string(w.Args)) != canonicalJSON(string(asked.Args)) {
		// The wait on record is not this call's (a forged run.waiting
		// came first): its answer decides nothing here.
		return &tools.Result{IsError: true, Output: fmt.Sprintf(
			"denied: the approval on record (%s %s) is not this call's; it did not run", w.Tool, w.Args)}, nil
	}
	switch {
	case res.Outcome == event.WaitAllowed:
		if res.Always {
			l.always[w.Rule] = true
		}
		return nil, nil
	case res.Outcome == event.WaitTimedOut && w.OnTimeout == event.OnTimeoutAllow:
		return nil, nil
	case res.Outcome == event.WaitTimedOut && w.OnTimeout == event.OnTimeoutFail:
		return nil, &WaitFailedError{Wait: w}
	}
	return &tools.Result{IsError: true, Output: denial(res, w)}, nil
}

// denial is a denied call's result: who denied it and why.
func denial(res event.WaitResolvedData, w event.RunWaitingData) string {
	if res.Outcome == event.WaitTimedOut {
		return fmt.Sprintf("denied (timeout): nobody approved this %s call before %s; it did not run", w.Tool, w.Until)
	}
	via := res.Via
	if res.Who != "" {
		via += ", " + res.Who
	}
	reason := res.Reason
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Sprintf("denied (%s): %s; the call did not run", via, reason)
}

// waitTool turns a wait tool's request into its wait, and the wait's
// resolution into the call's result.
func (l *loop) waitTool(ctx context.Context, call llm.ToolCall, req tools.WaitRequest) (tools.Result, error) {
	w := event.RunWaitingData{
		WaitID: l.waitID("tool", call.ID), Kind: req.Kind, OnTimeout: event.OnTimeoutContinue,
		CallID: call.ID, Tool: call.Name, Args: argsJSON(call.Arguments),
		Question: req.Question, Options: req.Options, Reason: req.Reason, Name: req.Name,
	}
	switch req.Kind {
	case event.WaitQuestion:
		w.Until = l.deadline(time.Time{}, l.askTimeout())
	default:
		w.Until = l.deadline(req.Until, l.maxWait())
	}
	res, w, err := l.await(ctx, w)
	if err != nil {
		return tools.Result{}, err
	}
	switch {
	case res.Outcome == event.WaitTimedOut && w.OnTimeout == event.OnTimeoutFail:
		return tools.Result{}, &WaitFailedError{Wait: w}
	case res.Outcome == event.WaitAnswered:
		from := res.Via
		if res.Who != "" {
			from = res.Who + " via " + res.Via
		}
		return tools.Result{Output: fmt.Sprintf("Answer (%s): %s", from, res.Answer)}, nil
	case res.Outcome == event.WaitSignalled:
		out := fmt.Sprintf("Signal %s arrived.", w.Name)
		if len(res.Data) > 0 {
			out += " Data: " + string(res.Data)
		}
		return tools.Result{Output: out}, nil
	case res.Outcome == event.WaitElapsed || w.Kind == event.WaitSleep:
		return tools.Result{Output: fmt.Sprintf("Waited until %s; it is now %s.", w.Until, time.Now().UTC().Format(time.RFC3339))}, nil
	case w.Kind == event.WaitSignal:
		return tools.Result{Output: fmt.Sprintf("No signal %s arrived before %s.", w.Name, w.Until)}, nil
	case res.Outcome == event.WaitDenied:
		return tools.Result{IsError: true, Output: denial(res, w)}, nil
	}
	return tools.Result{Output: fmt.Sprintf("Nobody answered before %s. Go on with your best judgement, and say what you assumed.", w.Until)}, nil
}

// await resolves the wait w: by the answer it already has, by asking the
// Waiter, or not at all (ErrParked). A wait asked again is the wait as
// first recorded, deadline included; run.waiting is recorded again, so
// that the run is waiting again whatever stopped it in between.
func (l *loop) await(ctx context.Context, w event.RunWaitingData) (event.WaitResolvedData, event.RunWaitingData, error) {
	return l.awaitWith(ctx, w, l.cfg.Waiter)
}

// awaitWith is await with waiters, each asked in turn while the one
// before parks (its person is gone); none, or all parked: ErrParked.
func (l *loop) awaitWith(ctx context.Context, w event.RunWaitingData, waiters ...Waiter) (event.WaitResolvedData, event.RunWaitingData, error) {
	if known, ok := l.cfg.Waits[w.WaitID]; ok {
		w = known.Waiting
		if known.Resolution != nil {
			if !known.Journaled {
				if err := l.emit(ctx, event.New(event.WaitResolved, *known.Resolution)); err != nil {
					return event.WaitResolvedData{}, w, err
				}
				known.Journaled = true
				l.cfg.Waits[w.WaitID] = known
			}
			return *known.Resolution, w, nil
		}
	}
	if err := l.emit(ctx, event.New(event.RunWaiting, w)); err != nil {
		return event.WaitResolvedData{}, w, err
	}
	if err := l.notifyHooks(ctx, w); err != nil {
		return event.WaitResolvedData{}, w, err
	}
	res, err := event.WaitResolvedData{}, ErrParked
	for _, waiter := range waiters {
		if waiter == nil {
			continue
		}
		if res, err = waiter.Wait(ctx, w); !errors.Is(err, ErrParked) {
			break
		}
	}
	if err != nil {
		return res, w, err
	}
	res.WaitID = w.WaitID
	if err := l.emit(ctx, event.New(event.WaitResolved, res)); err != nil {
		return res, w, err
	}
	l.cfg.Waits[w.WaitID] = adapter.Wait{Waiting: w, Resolution: &res, Journaled: true}
	return res, w, nil
}

// waitID names the wait of a call: the same whenever the run asks it
// again, and different for every call of the run, since call ids may
// repeat across turns.
func (l *loop) waitID(what, callID string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%s", l.cfg.WaitScope, what, l.state.Turns, callID))
	return "w" + hex.EncodeToString(h[:6])
}

// deadline is at, or now+d when at is zero, at most max_wait away.
func (l *loop) deadline(at time.Time, d time.Duration) string {
	now := time.Now()
	if at.IsZero() {
		at = now.Add(d)
	}
	if limit := now.Add(l.maxWait()); at.After(limit) {
		at = limit
	}
	return at.UTC().Format(time.RFC3339)
}

func (l *loop) askTimeout() time.Duration {
	if l.cfg.AskTimeout > 0 {
		return l.cfg.AskTimeout
	}
	return DefaultAskTimeout
}

func (l *loop) maxWait() time.Duration {
	if l.cfg.MaxWait > 0 {
		return l.cfg.MaxWait
	}
	return DefaultMaxWait
}

// alwaysAllowed are the rules an answer allowed for the rest of the run.
func alwaysAllowed(waits map[string]adapter.Wait) map[string]bool {
	out := map[string]bool{}
	for _, w := range waits {
		if r := w.Resolution; r != nil && r.Outcome == event.WaitAllowed && r.Always && w.Waiting.Rule != "" {
			out[w.Waiting.Rule] = true
		}
	}
	return out
}
