package orchestrator

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"agent/adapter"
	"agent/event"
	"agent/llm"
	"agent/store"
)

// park plays a child whose loop asks for approval of a bash call and,
// with nobody to ask, parks: its conversation, its run.waiting, and a
// runner.result that says waiting.
func (c *child) park(waitID string) *adapter.Result {
	c.emit(event.MessageCompleted, event.MessageData{Role: "user", Text: "do " + c.spec.PhaseID})
	c.emit(event.MessageCompleted, event.MessageData{Role: "assistant", Usage: &event.Usage{PromptTokens: 7, CompletionTokens: 3},
		ToolCalls: []event.ToolCall{{ID: "call-1", Name: "bash", Arguments: `{"command":"git push"}`}}})
	c.emit(event.RunWaiting, event.RunWaitingData{WaitID: waitID, Kind: event.WaitApproval, CallID: "call-1", Tool: "bash",
		Until: time.Now().Add(time.Hour).UTC().Format(time.RFC3339), OnTimeout: event.OnTimeoutDeny, Rule: "bash"})
	return &adapter.Result{Status: event.StatusWaiting, Reason: "the run waits", Usage: event.Usage{PromptTokens: 7, CompletionTokens: 3}}
}

// goOnFrom checks that a child continues where its attempt parked on
// waitID, records the answer its spec carries, and completes.
func (c *child) goOnFrom(t *testing.T, waitID string) *adapter.Result {
	t.Helper()
	s := c.spec
	if len(s.History) != 2 || s.History[1].Role != llm.RoleAssistant || len(s.History[1].ToolCalls) != 1 || s.Turns != 1 || s.Usage.PromptTokens != 7 {
		t.Errorf("%s goes on from history %+v, %d turns, usage %+v: want its conversation so far", c.key(), s.History, s.Turns, s.Usage)
	}
	if len(s.Waits) != 1 || s.Waits[0].Waiting.WaitID != waitID || s.Waits[0].Resolution == nil {
		t.Fatalf("%s goes on with waits %+v, want %s answered", c.key(), s.Waits, waitID)
	}
	c.emit(event.WaitResolved, *s.Waits[0].Resolution)
	return completed("done " + c.spec.PhaseID)
}

func (fx *fixture) answer(waitID string) {
	fx.t.Helper()
	if _, err := fx.db.ResolveWait(context.Background(), testRunID, waitID,
		event.WaitResolvedData{Outcome: event.WaitAllowed, Via: event.ViaCLI}); err != nil {
		fx.t.Fatal(err)
	}
}

// A phase that parks waits, neither failed nor retried: the phase beside it
// finishes, the one after it does not start, and the harness waits. Once
// answered, a resume continues the same attempt where it stopped, its
// conversation and its answer in its spec, and the run completes. Before
// the answer, a resume starts no child for it.
func TestWaitingPhaseParksTheHarnessAndGoesOnAsTheSameAttempt(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, func(c *Config) {
		c.Parallel = 2
		c.Waits = adapter.WaitOptions{Ask: []string{"bash"}, AskTimeoutMS: 60_000}
	})
	fx.adopt(ph("deploy"), ph("docs"), ph("announce", "deploy"))
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if !reflect.DeepEqual(c.spec.Ask, []string{"bash"}) || c.spec.AskTimeoutMS != 60_000 {
			t.Errorf("%s spec has wait options %+v, want the run's", c.key(), c.spec.WaitOptions)
		}
		if c.spec.PhaseID == "deploy" {
			return c.park("w-deploy")
		}
		return nil
	}
	out := fx.execute(context.Background())
	if !reflect.DeepEqual(out, &Outcome{Status: event.StatusWaiting}) {
		t.Fatalf("outcome = %+v, want waiting", out)
	}
	phases := fx.phases()
	if phases["deploy"].Status != event.StatusWaiting || phases["docs"].Status != event.StatusCompleted || phases["announce"].Attempts != 0 {
		t.Errorf("phases: deploy %s, docs %s, announce %d attempts; want waiting, completed, not started",
			phases["deploy"].Status, phases["docs"].Status, phases["announce"].Attempts)
	}
	if got := fx.attemptStatuses("deploy"); !reflect.DeepEqual(got, []string{event.StatusWaiting}) {
		t.Errorf("deploy attempts = %v, want one waiting", got)
	}
	if n := len(fx.phaseData(event.PhaseFailed, "deploy")); n != 0 {
		t.Errorf("%d phase.failed for the waiting phase", n)
	}
	mustContain(t, "progress.md", fx.readRunFile("progress.md"), "| deploy | waiting | 1 |")

	// Resumed before anyone answered: it still waits, and no child starts.
	fx.restart()
	if out := fx.execute(context.Background()); out.Status != event.StatusWaiting {
		t.Fatalf("unanswered resume: outcome %+v, want waiting", out)
	}
	if got := fx.spawn.started(); !reflect.DeepEqual(got, []string{"deploy/1", "docs/1"}) && !reflect.DeepEqual(got, []string{"docs/1", "deploy/1"}) {
		t.Errorf("children started = %v, want deploy/1 and docs/1 only", got)
	}
	if n := len(fx.sink.ofType(event.PhaseStarted)); n != 0 {
		t.Errorf("an unanswered resume recorded %d phase.started", n)
	}

	fx.answer("w-deploy")
	fx.restart()
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if c.key() == "deploy/1" {
			return c.goOnFrom(t, "w-deploy")
		}
		return nil
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("answered resume: outcome %+v, want completed", out)
	}
	if got := fx.spawn.started()[2:]; !reflect.DeepEqual(got, []string{"deploy/1", "announce/1"}) {
		t.Errorf("children started on resume = %v, want deploy/1 again, then announce/1", got)
	}
	if got := fx.attemptStatuses("deploy"); !reflect.DeepEqual(got, []string{event.StatusPassed}) {
		t.Errorf("deploy attempts = %v, want the one attempt, passed", got)
	}
	if ws, _ := fx.db.Waits(context.Background(), testRunID); len(ws) != 1 || !ws[0].Journaled {
		t.Errorf("waits = %+v, want the answer journaled", ws)
	}
}

// An answer that comes while other phases still run lets the waiting
// phase go on in the same Execute: the harness never parks.
func TestWaitingPhaseGoesOnOnceAnsweredWhileOthersRun(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, func(c *Config) { c.Parallel = 2; c.WaitPoll = 10 * time.Millisecond })
	fx.adopt(ph("deploy"), ph("slow"))
	parked, wentOn := make(chan struct{}), make(chan struct{})
	var deploys atomic.Int32
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		switch {
		case c.spec.PhaseID == "slow":
			select { // it outlives the wait
			case <-wentOn:
			case <-time.After(waitLimit):
				t.Error("the waiting phase did not go on while slow ran")
			}
			return nil
		case deploys.Add(1) == 1:
			defer close(parked)
			return c.park("w-deploy")
		}
		defer close(wentOn)
		return c.goOnFrom(t, "w-deploy")
	}
	go func() {
		<-parked
		fx.answer("w-deploy")
	}()
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v, want completed", out)
	}
	if got := fx.attemptStatuses("deploy"); !reflect.DeepEqual(got, []string{event.StatusPassed}) {
		t.Errorf("deploy attempts = %v, want the one attempt, passed", got)
	}
}

// A wait whose deadline passed is settled (ExpireWaits) before its answer
// is looked for: the phase goes on with the deadline's outcome.
func TestWaitingPhaseGoesOnAtItsDeadline(t *testing.T) {
	t.Parallel()
	var expired atomic.Bool
	fx := newFixture(t, nil)
	fx.cfg.ExpireWaits = func(ctx context.Context) error {
		if !expired.Load() {
			return nil
		}
		_, err := fx.db.ResolveWait(ctx, testRunID, "w-deploy", event.WaitResolvedData{Outcome: event.WaitTimedOut, Via: event.ViaTimeout})
		if errors.As(err, new(*store.AnsweredError)) {
			return nil // settled by an earlier look
		}
		return err
	}
	fx.restart()
	fx.adopt(ph("deploy"))
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result { return c.park("w-deploy") }
	if out := fx.execute(context.Background()); out.Status != event.StatusWaiting {
		t.Fatalf("outcome = %+v, want waiting", out)
	}
	expired.Store(true) // its deadline passes
	fx.restart()
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if s := c.spec; len(s.Waits) != 1 || s.Waits[0].Resolution == nil || s.Waits[0].Resolution.Outcome != event.WaitTimedOut {
			t.Errorf("%s goes on with waits %+v, want timed out", c.key(), s.Waits)
		}
		return nil
	}
	if out := fx.execute(context.Background()); out.Status != event.StatusCompleted {
		t.Fatalf("outcome = %+v, want completed", out)
	}
	if got := fx.spawn.started(); !reflect.DeepEqual(got, []string{"deploy/1", "deploy/1"}) {
		t.Errorf("children started = %v, want deploy/1 twice", got)
	}
}

// A planner that asks the person parks the planning; the next Plan goes
// on where it stopped once answered, as the same attempt, and a planning
// after one that ended starts afresh as the next attempt.
func TestPlannerParksAndGoesOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fx := newFixture(t, func(c *Config) { c.Waits = adapter.WaitOptions{AskHuman: true, Ask: []string{"bash"}} })
	submitted := `{"objective":"Ship","phases":[{"id":"only","instructions":"Ship it.","evidence":{"type":"none"}}]}`
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		if !c.spec.AskHuman {
			t.Errorf("planner spec %+v, want ask_human", c.spec.WaitOptions)
		}
		return c.park("w-plan")
	}
	if _, err := fx.o.Plan(ctx, "ship it"); !errors.Is(err, ErrParked) {
		t.Fatalf("Plan: %v, want ErrParked", err)
	}
	mustContain(t, "planner prompt", fx.spawn.prompt(t, event.PlannerPhaseID, 1), "ask_human")
	if _, err := fx.o.Plan(ctx, "ship it"); !errors.Is(err, ErrParked) || len(fx.spawn.all()) != 1 {
		t.Fatalf("Plan before the answer: %v, %d children; want ErrParked and no new child", err, len(fx.spawn.all()))
	}
	fx.answer("w-plan")
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		c.goOnFrom(t, "w-plan")
		return completed(submitted)
	}
	if p, err := fx.o.Plan(ctx, "ship it"); err != nil || p.Objective != "Ship" {
		t.Fatalf("Plan once answered: %+v, %v", p, err)
	}
	if got := fx.spawn.started(); !reflect.DeepEqual(got, []string{"_plan/1", "_plan/1"}) {
		t.Errorf("planners started = %v, want attempt 1 going on", got)
	}
}

// A planning after one that ended starts afresh, as the planner's next
// attempt: the earlier conversation and waits are not its own.
func TestPlanningAgainIsANewAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fx := newFixture(t, nil)
	fx.spawn.ChildFunc = func(ctx context.Context, c *child) *adapter.Result {
		c.emit(event.MessageCompleted, event.MessageData{Role: "user", Text: "plan"})
		return ended(event.StatusFailed, "no plan")
	}
	for range 2 {
		if _, err := fx.o.Plan(ctx, "ship it"); err == nil {
			t.Fatal("Plan succeeded, want a planning failure")
		}
	}
	if got := fx.spawn.started(); !reflect.DeepEqual(got, []string{"_plan/1", "_plan/2"}) {
		t.Errorf("planners started = %v, want attempts 1 and 2", got)
	}
	if s := fx.spawn.call(t, event.PlannerPhaseID, 2).Spec; len(s.History) != 0 || len(s.Waits) != 0 {
		t.Errorf("the second planning started from %+v", s)
	}
}
