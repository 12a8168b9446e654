package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"agent/adapter"
	"agent/approval"
	"agent/config"
	"agent/event"
	"agent/runner"
	"agent/store"
)

// People in the loop (docs/PROTOCOL.md#waits): a run parks on a wait and
// goes on where it stopped once the wait is resolved, by whichever
// channel answers first. The loop asks (runner/wait.go); the store keeps
// each wait and its one answer (store/waits.go); this file lays the
// options over config.toml's, settles deadlines before a drive, and is the
// one way every front-end answers (Answer).

func (o Options) askErr() error {
	_, err := approval.Parse([]string{strings.Join(o.Ask, ",")})
	return err
}

func validOnTimeout(s string) bool {
	switch s {
	case "", event.OnTimeoutDeny, event.OnTimeoutAllow, event.OnTimeoutContinue, event.OnTimeoutFail:
		return true
	}
	return false
}

// waitDefaults lays config.toml's [approvals] and max_wait under o: its
// rules are added to the run's, its deadline and on_timeout apply unless
// the run sets them.
func waitDefaults(o *Options, f config.File) error {
	a := f.Approvals
	// One list, each rule once; a comma inside a rule's glob survives
	// a front-end that split the list on commas.
	rules, err := approval.Parse([]string{strings.Join(append(a.Ask[:len(a.Ask):len(a.Ask)], o.Ask...), ",")})
	if err != nil {
		return optionErr("ask", "{ask}: %v", err)
	}
	o.Ask = nil
	for _, r := range rules {
		o.Ask = append(o.Ask, r.Text)
	}
	if o.AskOnTimeout == "" {
		o.AskOnTimeout = a.OnTimeout
	}
	for _, d := range []struct {
		field, key, text string
		to               *Duration
	}{{"ask_timeout", "[approvals] timeout", a.Timeout, &o.AskTimeout}, {"max_wait", "max_wait", f.MaxWait, &o.MaxWait}} {
		if d.text == "" || *d.to != 0 {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return optionErr(d.field, "config.toml %s %q must be a positive duration like 24h", d.key, d.text)
		}
		*d.to = Duration(v)
	}
	if !validOnTimeout(o.AskOnTimeout) {
		return optionErr("ask_on_timeout", "config.toml [approvals] on_timeout is deny, allow, continue or fail, not %q", o.AskOnTimeout)
	}
	return nil
}

// withNames adds names to an allow list that names tools; an empty one
// offers them already.
func withNames(allow []string, names ...string) []string {
	if len(allow) == 0 {
		return allow
	}
	return append(allow[:len(allow):len(allow)], names...)
}

// asksHuman is whether the model may ask the person (ask_human). Unset is
// no: each front-end says whether a person can answer (the CLI on a
// terminal; the gateway for its sessions unless run.start says otherwise).
func (o Options) asksHuman() bool { return o.AskHuman != nil && *o.AskHuman }

// waitOptions are the run's approval rules and wait tools, as each of its
// loops gets them.
func (o Options) waitOptions() adapter.WaitOptions {
	return adapter.WaitOptions{
		Ask: o.Ask, AskOnTimeout: o.AskOnTimeout, AskHuman: o.asksHuman(), WaitTools: o.WaitTools,
		AskTimeoutMS: time.Duration(o.AskTimeout).Milliseconds(), MaxWaitMS: time.Duration(o.MaxWait).Milliseconds(),
	}
}

// waitSpec sets the spec's waits: the run's options and the waits it has.
func (s *Supervisor) waitSpec(ctx context.Context, runID string, o Options, spec *adapter.PhaseSpec) error {
	spec.WaitOptions = o.waitOptions()
	ws, err := s.db.Waits(ctx, runID)
	if err != nil {
		return err
	}
	spec.Waits = nil
	for _, w := range ws {
		spec.Waits = append(spec.Waits, adapter.Wait{Waiting: w.Waiting, Resolution: w.Resolution, Journaled: w.Journaled})
	}
	return nil
}

// expireWaits resolves the run's open waits whose deadline has passed:
// a sleep elapsed, anything else timed out (its on_timeout applies). An
// answer that came first stays.
func (s *Supervisor) expireWaits(ctx context.Context, runID string) error {
	ws, err := s.db.Waits(ctx, runID)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, w := range ws {
		if w.Resolution != nil || w.Until.After(now) {
			continue
		}
		_, err := s.db.ResolveWait(ctx, runID, w.Waiting.WaitID, timedOut(w.Waiting))
		var answered *store.AnsweredError
		if err != nil && !errors.As(err, &answered) {
			return err
		}
	}
	return nil
}

// timedOut is the resolution of a wait whose deadline passed: a sleep
// elapsed, anything else timed out (its on_timeout applies).
func timedOut(w event.RunWaitingData) event.WaitResolvedData {
	if w.Kind == event.WaitSleep {
		return event.WaitResolvedData{Outcome: event.WaitElapsed, Via: event.ViaTimeout}
	}
	return event.WaitResolvedData{Outcome: event.WaitTimedOut, Via: event.ViaTimeout}
}

// firstAnswer is the answer a wait has after an attempt to resolve it:
// this one, or the one that came first.
func firstAnswer(w store.Wait, err error) (event.WaitResolvedData, error) {
	var answered *store.AnsweredError
	switch {
	case errors.As(err, &answered):
		return answered.First, nil
	case err != nil:
		return event.WaitResolvedData{}, err
	}
	return *w.Resolution, nil
}

// Decision is an answer to a wait, from any channel.
type Decision struct {
	// WaitID names the wait; "" with CallID names an approval's call;
	// both "" mean the run's one open wait of a kind Decide takes.
	WaitID, CallID string
	Decide         string // DecideAllow, DecideDeny, DecideAnswer, DecideSignal
	Always         bool   // allow: the rule for the rest of the run
	Text           string // answer: the answer; deny: the reason
	Name           string // signal: its name
	Data           []byte // signal: its JSON payload
	Via, Who       string
}

// Decisions.
const (
	DecideAllow  = "allow"
	DecideDeny   = "deny"
	DecideAnswer = "answer"
	DecideSignal = "signal"
)

// AnswerError is a decision that fits no wait of the run.
type AnswerError struct{ Msg string }

func (e *AnswerError) Error() string { return e.Msg }

// Answer resolves a wait of run runID with d: the one way every channel
// answers. The first answer wins; a later one is a *store.AnsweredError.
func Answer(ctx context.Context, db *store.DB, runID string, d Decision) (store.Wait, error) {
	ws, err := db.Waits(ctx, runID)
	if err != nil {
		return store.Wait{}, err
	}
	w, err := pick(ws, d)
	if err != nil {
		return store.Wait{}, err
	}
	res := event.WaitResolvedData{Via: d.Via, Who: d.Who}
	switch d.Decide {
	case DecideAllow:
		res.Outcome, res.Always = event.WaitAllowed, d.Always
	case DecideDeny:
		res.Outcome, res.Reason = event.WaitDenied, d.Text
	case DecideAnswer:
		res.Outcome, res.Answer = event.WaitAnswered, d.Text
	case DecideSignal:
		res.Outcome, res.Data = event.WaitSignalled, d.Data
	}
	return db.ResolveWait(ctx, runID, w.Waiting.WaitID, res)
}

// takes are the kinds of wait each decision answers.
var takes = map[string][]string{
	DecideAllow:  {event.WaitApproval},
	DecideDeny:   {event.WaitApproval, event.WaitQuestion},
	DecideAnswer: {event.WaitQuestion},
	DecideSignal: {event.WaitSignal},
}

// pick is the wait d answers.
func pick(ws []store.Wait, d Decision) (store.Wait, error) {
	kinds, ok := takes[d.Decide]
	if !ok {
		return store.Wait{}, &AnswerError{Msg: fmt.Sprintf("decision %q: want allow, deny, answer or signal", d.Decide)}
	}
	var open, fits []store.Wait
	var last *store.Wait // the latest answered wait d would have fit
	for _, w := range ws {
		if w.Resolution != nil && contains(kinds, w.Waiting.Kind) {
			last = &w
		}
		switch {
		case d.WaitID != "" && w.Waiting.WaitID == d.WaitID, d.WaitID == "" && d.CallID != "" && w.Waiting.CallID == d.CallID && w.Resolution == nil:
			if !contains(kinds, w.Waiting.Kind) {
				return w, &AnswerError{Msg: fmt.Sprintf("wait %s is a %s; %s does not answer it", w.Waiting.WaitID, w.Waiting.Kind, d.Decide)}
			}
			if w.Resolution != nil {
				return w, &store.AnsweredError{First: *w.Resolution}
			}
			return w, nil
		case w.Resolution == nil:
			open = append(open, w)
			if contains(kinds, w.Waiting.Kind) && (d.Decide != DecideSignal || w.Waiting.Name == d.Name) {
				fits = append(fits, w)
			}
		}
	}
	switch {
	case d.WaitID != "" || d.CallID != "":
		return store.Wait{}, &AnswerError{Msg: fmt.Sprintf("no wait %s%s in this run", d.WaitID, d.CallID)}
	case len(fits) == 1:
		return fits[0], nil
	case len(fits) > 1:
		var ids []string
		for _, w := range fits {
			ids = append(ids, w.Waiting.CallID)
		}
		return store.Wait{}, &AnswerError{Msg: fmt.Sprintf("the run waits for %d answers; name one with --call (%s)", len(fits), strings.Join(ids, ", "))}
	case len(open) == 0 && last != nil && last.Resolution.Via != event.ViaTimeout:
		// Someone answered first.
		return *last, &store.AnsweredError{First: *last.Resolution}
	case d.Decide == DecideSignal:
		return store.Wait{}, &AnswerError{Msg: fmt.Sprintf("the run waits for no signal %q", d.Name)}
	case len(open) > 0:
		return store.Wait{}, &AnswerError{Msg: fmt.Sprintf("the run waits for a %s, which %s does not answer", open[0].Waiting.Kind, d.Decide)}
	}
	return store.Wait{}, &AnswerError{Msg: "the run waits for nothing"}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// HowToAnswer says, for people, how to resolve a run's wait.
func HowToAnswer(runID string, w event.RunWaitingData) string {
	switch w.Kind {
	case event.WaitApproval:
		return fmt.Sprintf("agent approve %s (or agent deny %s --reason TEXT); add --resume to continue at once", runID, runID)
	case event.WaitQuestion:
		return fmt.Sprintf("agent answer %s TEXT; add --resume to continue at once", runID)
	case event.WaitSignal:
		return fmt.Sprintf("agent signal %s %s [--data JSON]", runID, w.Name)
	}
	return fmt.Sprintf("it goes on by itself in a gateway or worker, or with agent resume %s, after %s", runID, w.Until)
}

// GoesOn says who goes on with run r once it was answered: a gateway or
// worker (a session's run, unless resume asks for it here), the process
// that drives it (its lease is held), or agent resume. "" means resume
// asks for it here and nobody else will: the caller resumes it.
func GoesOn(r *store.Run, resume bool, now time.Time) string {
	held := r.LeaseOwner != "" && r.LeaseExpiresAt.After(now)
	switch {
	case r.SessionID != "" && !resume:
		return fmt.Sprintf("a gateway or worker on this store continues run %s by itself", r.ID)
	case held:
		return fmt.Sprintf("the process that drives run %s goes on with it", r.ID)
	case !resume:
		return fmt.Sprintf("'agent resume %s' continues the run (or answer with --resume)", r.ID)
	}
	return ""
}

// Asker asks a person inline, in the process that drives the run (a
// terminal, an editor), while the other channels stay open: the first
// answer wins. It returns the decision (Via "" is ViaTerminal), ctx's
// error once another channel answered, or ErrPark when nobody is left to
// ask here (an editor that closed): the run then parks, waiting.
type Asker func(ctx context.Context, w event.RunWaitingData) (Decision, error)

// ErrPark is an Asker that can no longer ask: the run parks on its wait.
var ErrPark = errors.New("nobody is left to ask here; the run waits for another channel's answer")

// storeWaiter waits in this process: for the Asker, for an answer through
// another channel (the store), or for the deadline, whichever comes first.
type storeWaiter struct {
	db    *store.DB
	runID string
	ask   Asker
	poll  time.Duration
}

func (sw storeWaiter) Wait(ctx context.Context, w event.RunWaitingData) (event.WaitResolvedData, error) {
	askCtx, stop := context.WithCancel(ctx)
	defer stop()
	asked := make(chan Decision, 1)
	parked := make(chan struct{})
	if sw.ask != nil {
		go func() {
			d, err := sw.ask(askCtx, w)
			switch {
			case err == nil:
				asked <- d
			case errors.Is(err, ErrPark):
				close(parked)
			}
		}()
	}
	deadline := time.NewTimer(time.Until(w.UntilTime(time.Now())))
	defer deadline.Stop()
	tick := time.NewTicker(sw.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return event.WaitResolvedData{}, context.Cause(ctx)
		case d := <-asked:
			d.WaitID, d.Via = w.WaitID, cmp.Or(d.Via, event.ViaTerminal)
			return firstAnswer(Answer(ctx, sw.db, sw.runID, d))
		case <-parked:
			return event.WaitResolvedData{}, runner.ErrParked
		case <-deadline.C:
			return firstAnswer(sw.db.ResolveWait(ctx, sw.runID, w.WaitID, timedOut(w)))
		case <-tick.C:
			ws, err := sw.db.Waits(ctx, sw.runID)
			if err != nil {
				continue // the store may be busy: the next tick asks again
			}
			for _, got := range ws {
				if got.Waiting.WaitID == w.WaitID && got.Resolution != nil {
					return *got.Resolution, nil
				}
			}
		}
	}
}

// waiter is how a drive waits: in this process when it can ask someone
// (Drive.Ask), otherwise it parks the run.
func (s *Supervisor) waiter(runID string, d Drive) runner.Waiter {
	if d.Ask == nil {
		return nil
	}
	return storeWaiter{db: s.db, runID: runID, ask: d.Ask, poll: 200 * time.Millisecond}
}

// hold waits in this process for an answer through the other channels
// (the store), for a question that cannot park: one an MCP server asks
// while a call runs (runner.Config.Hold).
func (s *Supervisor) hold(runID string) runner.Waiter {
	return storeWaiter{db: s.db, runID: runID, poll: 200 * time.Millisecond}
}

// holdFor is hold for a child's wait waitID: only a question an MCP
// server asked while a call runs may be held for (the others park).
func (s *Supervisor) holdFor(ctx context.Context, runID, waitID string) (event.WaitResolvedData, error) {
	ws, err := s.db.Waits(ctx, runID)
	if err != nil {
		return event.WaitResolvedData{}, err
	}
	for _, w := range ws {
		if w.Waiting.WaitID != waitID {
			continue
		}
		if w.Waiting.Kind != event.WaitQuestion || w.Waiting.Server == "" {
			return event.WaitResolvedData{}, fmt.Errorf("wait %s is no question of an MCP server: it parks", waitID)
		}
		return s.hold(runID).Wait(ctx, w.Waiting)
	}
	return event.WaitResolvedData{}, fmt.Errorf("no wait %s in run %s", waitID, runID)
}

// settleGoneQuestions resolves the run's open questions that an MCP
// server asked while a call ran in a process that is gone: nobody can
// answer them now (the server went with that process), so they time out,
// saying why; the call they belonged to is reported interrupted, or run
// again if read-only, and then asks anew.
func (s *Supervisor) settleGoneQuestions(ctx context.Context, runID string, sink Sink) error {
	ws, err := s.db.Waits(ctx, runID)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if w.Waiting.Server == "" || w.Journaled {
			continue
		}
		got := w.Resolution
		if got == nil {
			res := event.WaitResolvedData{Outcome: event.WaitTimedOut, Via: event.ViaTimeout,
				Reason: fmt.Sprintf("MCP server %q asked it while a call ran in a process that has ended; it cannot be answered now", w.Waiting.Server)}
			first, err := firstAnswer(s.db.ResolveWait(ctx, runID, w.Waiting.WaitID, res))
			if err != nil {
				return err
			}
			got = &first
		}
		if err := sink.Emit(ctx, event.New(event.WaitResolved, *got)); err != nil {
			return err
		}
	}
	return nil
}

// describeWait says what a wait is for, e.g. `approval of bash {"command":"git push"}`.
func describeWait(w event.RunWaitingData) string {
	switch w.Kind {
	case event.WaitApproval:
		return fmt.Sprintf("approval of %s %s (rule %s)", w.Tool, w.Args, w.Rule)
	case event.WaitQuestion:
		return fmt.Sprintf("an answer to %q", w.Question)
	case event.WaitSignal:
		return fmt.Sprintf("signal %q", w.Name)
	}
	return "a time (" + w.Reason + ")"
}
