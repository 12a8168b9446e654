package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"agent/event"
	"agent/runner"
	"agent/store"
	"agent/tools"
)

// Subagents (docs/PROTOCOL.md#subagents): a task call of a run's loop is
// answered by a sub-run, a durable run of its own (runs.parent_run_id),
// driven here in an `agent runner` child with the parent's workspace,
// sandbox, approval rules and model, a fresh conversation, a share of the
// parent's budget and no task tool. The loop records the call started
// before it asks (runner/task.go), so a parent resumed after a crash
// continues the call's sub-run, or takes the answer it already gave,
// rather than starting another. The sub-run's events are shown in the
// parent's stream, with subagent set; its waits are the parent's too.

// maxSubagents is how many task calls of a reply run at once.
func (o Options) maxSubagents() int {
	if o.MaxSubagents > 0 {
		return o.MaxSubagents
	}
	return runner.DefaultMaxSubagents
}

// subagents runs the sub-runs of one parent's task calls, for every way
// its loop is driven: in this process (runner.Env.Tasks), in a child
// (adapter.Config.OnTask), or in a harness phase's child, here or on a
// worker.
type subagents struct {
	s       *Supervisor
	parent  *store.Run
	opts    Options // the parent's
	sink    Sink    // the parent's stream
	phaseID string  // the harness phase whose attempt calls, if any
	attempt int
	// ask waits for a person in this process when a sub-run waits for
	// one; nil parks the parent with it. asking lets one wait be asked at
	// a time.
	ask    runner.Waiter
	asking sync.Mutex
}

// Delegate runs the sub-run of a task call to its end and says how it
// ended: a new one, or, for a call resumed, the one it already has.
func (t *subagents) Delegate(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error) {
	persist := context.WithoutCancel(ctx)
	call := req.CallID
	if t.phaseID != "" {
		call = fmt.Sprintf("%s/%d/%s", t.phaseID, t.attempt, req.CallID)
	}
	sub, resume, err := t.open(persist, call, req)
	switch {
	case err != nil:
		return event.TaskResultData{}, err
	case sub == nil:
		return event.TaskResultData{Status: event.StatusFailed, Reason: event.ReasonBudgetExhausted,
			Detail: "the run's budget has nothing left for a subagent"}, nil
	}
	o, err := DecodeOptions(sub)
	if err != nil {
		return event.TaskResultData{}, err
	}
	subCtx, stop := context.WithCancelCause(persist)
	defer stop(nil)
	defer context.AfterFunc(ctx, func() { stop(asStop(context.Cause(ctx))) })()
	return t.drive(subCtx, sub, o, resume)
}

// asStop is why a sub-run stops when its parent does: the parent's own
// *Stop (cancelled for good, timed out), or else an interrupt, which the
// parent's resume continues.
func asStop(cause error) error {
	var stop *Stop
	if errors.As(cause, &stop) {
		return cause
	}
	return Interrupt("its parent stopped: " + cause.Error())
}

// drive drives a sub-run until it ends, or parks: then, with someone to
// ask here, it asks and goes on; otherwise the parent parks too.
func (t *subagents) drive(ctx context.Context, sub *store.Run, o Options, resume bool) (event.TaskResultData, error) {
	persist := context.WithoutCancel(ctx)
	for {
		if finished(sub.Status) {
			return resultOf(sub.ID, sub.Status, sub.Result, sub.Reason, sub.Detail, sub.Usage), nil
		}
		if err := t.shareWaits(persist, sub.ID); err != nil {
			return event.TaskResultData{}, err
		}
		end, err := t.s.driveToEnd(ctx, sub, Drive{Options: o, Resume: resume, Child: true, Show: t.mirror(persist, sub.ID)})
		if err != nil {
			return event.TaskResultData{}, err
		}
		d := end.Data
		switch {
		case ctx.Err() != nil || end.Type == event.RunInterrupted:
			// The parent stops with it; its resume continues the sub-run.
			return event.TaskResultData{}, fmt.Errorf("subagent %s stopped: %s", sub.ID, d.Detail)
		case end.Type != event.RunWaiting:
			return resultOf(sub.ID, d.Status, d.Result, d.Reason, d.Detail, d.Usage), nil
		}
		asked, err := t.parkOrAsk(ctx, sub.ID)
		if err != nil || !asked {
			return event.TaskResultData{RunID: sub.ID, Status: event.StatusWaiting, Usage: d.Usage}, err
		}
		if sub, err = t.s.db.GetRun(persist, sub.ID); err != nil {
			return event.TaskResultData{}, err
		}
		if err := t.acquire(persist, sub.ID); err != nil {
			return event.TaskResultData{}, err
		}
		resume = true
	}
}

// open finds the sub-run a resumed call already has, leased to this
// supervisor, or creates one: nil when the parent's budget has nothing
// left to share.
func (t *subagents) open(ctx context.Context, call string, req event.TaskRequestData) (*store.Run, bool, error) {
	if req.Resume {
		sub, err := t.s.db.SubRun(ctx, t.parent.ID, call)
		switch {
		case err == nil && finished(sub.Status):
			return sub, true, nil
		case err == nil:
			return sub, true, t.acquire(ctx, sub.ID)
		case !errors.Is(err, store.ErrNotFound):
			return nil, false, err
		}
		// The parent stopped before the sub-run was made.
	}
	if req.MaxTokens < 0 || req.MaxCost < 0 {
		return nil, false, nil
	}
	o := t.opts
	o.Tools = subagentTools(o.Tools)
	o.Until, o.MaxIterations, o.Timeout, o.MaxSubagents = "", 0, 0, 0
	o.Harness, o.Parallel, o.PhaseTimeout, o.ContextBudget = false, 0, 0, 0
	o.MaxTokens, o.MaxCost = req.MaxTokens, req.MaxCost
	// The parent's answer may have a schema and its session a compaction
	// asked for; a sub-run answers the parent's model in text, alone.
	o.OutputSchema = nil
	if o.Compact == "now" {
		o.Compact = ""
	}
	sub := &store.Run{
		ID: uuid.NewString(), Kind: store.KindRun, Prompt: req.Prompt, Workspace: t.parent.Workspace,
		Model: o.Model, Config: o.encode(), ParentRunID: t.parent.ID, ParentCall: call, Description: req.Description,
	}
	return sub, false, t.s.db.CreateRun(ctx, sub, t.s.cfg.Owner, t.s.cfg.LeaseTTL)
}

// subagentTools are the tools a sub-run of a run offering these offers:
// the same but the task tool, and a phase's own (record_learning…).
func subagentTools(names []string) []string {
	drop := []string{tools.TaskName}
	for _, t := range tools.RecordTools() {
		drop = append(drop, t.Definition().Name)
	}
	return slices.DeleteFunc(slices.Clone(names), func(name string) bool { return slices.Contains(drop, name) })
}

// acquire takes a sub-run's lease, waiting for one its last driver left
// to expire: a parent driven on another machine that died cannot be
// proven dead, only outlived.
func (t *subagents) acquire(ctx context.Context, runID string) error {
	for {
		err := t.s.Acquire(ctx, runID)
		var held *store.LeaseHeldError
		if !errors.As(err, &held) {
			return err
		}
		select {
		case <-time.After(time.Until(held.ExpiresAt) + 100*time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

// finished is whether a sub-run has ended for good: its answer stands.
func finished(status string) bool {
	switch status {
	case event.StatusCompleted, event.StatusFailed, event.StatusCancelled:
		return true
	}
	return false
}

func resultOf(runID, status, result, reason, detail string, usage event.Usage) event.TaskResultData {
	return event.TaskResultData{RunID: runID, Status: status, Output: result, Reason: reason, Detail: detail, Usage: usage}
}

// mirror shows a sub-run's events, once persisted in its own journal, in
// the parent's stream: a copy with subagent set, which changes nothing of
// the parent's state. Its text deltas, waits and end are left out: the
// parent's own task call, and its copy of a wait, say those.
func (t *subagents) mirror(ctx context.Context, subID string) func(event.Event) {
	return func(e event.Event) {
		switch {
		case e.Type == event.MessageDelta, e.Type == event.RunWaiting, e.Type == event.WaitResolved, event.IsTerminal(e.Type):
			return
		}
		e.Subagent, e.RunID, e.SessionID, e.Seq = subID, t.parent.ID, t.parent.SessionID, 0
		e.PhaseID, e.Attempt = t.phaseID, t.attempt
		if err := t.sink.Emit(ctx, e); err != nil {
			t.s.log.Warn("show a subagent's event", "run_id", t.parent.ID, "subagent", subID, "err", err)
		}
	}
}

// parkOrAsk records the open waits of a sub-run that parked as the
// parent's (the same wait ids: one wait, one answer, from either run), and
// asks them here when someone can answer; asked says they were answered
// and the sub-run may go on.
func (t *subagents) parkOrAsk(ctx context.Context, subID string) (asked bool, err error) {
	persist := context.WithoutCancel(ctx)
	ws, err := t.s.db.Waits(persist, subID)
	if err != nil {
		return false, err
	}
	var open []event.RunWaitingData
	for _, w := range ws {
		if w.Resolution == nil {
			open = append(open, w.Waiting)
		}
	}
	if len(open) == 0 {
		return false, errors.New("a subagent parked without a wait on record")
	}
	for _, w := range open {
		if err := t.emit(persist, event.New(event.RunWaiting, w)); err != nil {
			return false, err
		}
	}
	if t.ask == nil {
		return false, nil
	}
	t.asking.Lock()
	defer t.asking.Unlock()
	for _, w := range open {
		res, err := t.ask.Wait(ctx, w)
		if err != nil {
			return false, err
		}
		res.WaitID = w.WaitID
		if err := t.emit(persist, event.New(event.WaitResolved, res)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// shareWaits gives each of a sub-run's waits the answer its copy in the
// parent has, and the other way round, whichever run was answered; the
// parent's journal then records the answer.
func (t *subagents) shareWaits(ctx context.Context, subID string) error {
	subs, err := t.s.db.Waits(ctx, subID)
	if err != nil || len(subs) == 0 {
		return err
	}
	if err := t.s.expireWaits(ctx, t.parent.ID); err != nil {
		return err
	}
	theirs, err := t.s.db.Waits(ctx, t.parent.ID)
	if err != nil {
		return err
	}
	for _, w := range subs {
		i := slices.IndexFunc(theirs, func(p store.Wait) bool { return p.Waiting.WaitID == w.Waiting.WaitID })
		if i < 0 {
			continue
		}
		p := theirs[i]
		var answered *store.AnsweredError
		switch {
		case w.Resolution == nil && p.Resolution != nil:
			if _, err := t.s.db.ResolveWait(ctx, subID, w.Waiting.WaitID, *p.Resolution); err != nil && !errors.As(err, &answered) {
				return err
			}
		case w.Resolution != nil && p.Resolution == nil:
			if p, err = t.s.db.ResolveWait(ctx, t.parent.ID, p.Waiting.WaitID, *w.Resolution); err != nil && !errors.As(err, &answered) {
				return err
			}
		}
		if p.Resolution != nil && !p.Journaled {
			if err := t.emit(ctx, event.New(event.WaitResolved, *p.Resolution)); err != nil {
				return err
			}
		}
	}
	return nil
}

// emit records an event of the parent's own, as its calling phase's.
func (t *subagents) emit(ctx context.Context, e event.Event) error {
	e.PhaseID, e.Attempt = t.phaseID, t.attempt
	return t.sink.Emit(ctx, e)
}
