package supervisor

import (
	"context"
	"errors"
	"fmt"

	"agent/adapter"
	"agent/event"
	"agent/mcp"
	"agent/runner"
	"agent/store"
	"agent/tools"
)

// The outbox of a run's side effects (docs/PROTOCOL.md#side-effects-intent-ack-outcome, docs/SCHEMA.md#receipts): an intent is
// written before its effect may start, its receipt marks it done, and an
// effect whose outcome was lost is never repeated unless the user asks.

// storeOutbox is the outbox of a loop in this process: the intent is
// written to the store before the tool acts, which it does as soon as
// Begin returns. The outcome goes to the run's sink while the call is
// open, as a child reports it: the same events in the same order.
type storeOutbox struct {
	db    *store.DB
	runID string
	owner string // the lease the intents are made under
	sink  Sink
}

func (o *storeOutbox) Report(ctx context.Context, e event.Event) error {
	return o.sink.Emit(ctx, e)
}

func (o *storeOutbox) Begin(ctx context.Context, in tools.Intent) (*event.ReceiptData, error) {
	r, err := o.db.BeginEffect(ctx, store.Receipt{
		Key: in.Key, RunID: o.runID, Tool: in.Tool, Type: in.ReceiptType, Args: in.Args, Acked: true, LeaseOwner: o.owner,
	}, false)
	switch {
	case errors.Is(err, store.ErrOutcomeUnknown):
		return nil, tools.ErrUnknownOutcome
	case err != nil:
		return nil, err
	case r != nil && !tools.SameEffect(in.Tool, r.Args, in.Args):
		return nil, &tools.DifferentError{Receipt: receiptData(r), Args: r.Args}
	case r != nil:
		done := receiptData(r)
		return &done, nil
	}
	return nil, nil
}

func receiptData(r *store.Receipt) event.ReceiptData {
	return event.ReceiptData{Type: r.Type, Key: r.Key, Details: r.Details}
}

// intent answers a child's effect.intent. The intent is persisted first,
// unacked; then, only if the effect may go ahead, it is marked acked just
// before the go-ahead is sent. An intent that never got that far cannot
// have happened, and recovery forgets it instead of blocking on it.
func (s *Supervisor) intent(ctx context.Context, in store.Receipt) adapter.Control {
	if why := s.declared(ctx, in); why != "" {
		return adapter.Control{Reason: "no side effect of this run: " + why}
	}
	in.Acked, in.LeaseOwner = false, s.cfg.Owner
	r, err := s.db.BeginEffect(ctx, in, false)
	switch {
	case errors.Is(err, store.ErrOutcomeUnknown):
		return adapter.Control{Unknown: true, Reason: err.Error()}
	case err != nil:
		return adapter.Control{Reason: "the intent could not be recorded: " + err.Error()}
	case r != nil:
		done := receiptData(r)
		return adapter.Control{Receipt: &done, Different: !tools.SameEffect(in.Tool, r.Args, in.Args), Args: r.Args}
	}
	if err := s.db.AckEffect(ctx, in.Key); err != nil {
		return adapter.Control{Reason: "the intent could not be recorded: " + err.Error()}
	}
	return adapter.Control{Proceed: true}
}

// declared says why a child's intent is for no side effect the run has,
// or "" when it is for one: a built-in effect, or a tool its MCP servers
// list under effects, recording the receipt type the intent names. The
// child's tools ask only for those; anything else came from something
// else that writes to its stdout, and its receipt could pass for a
// phase's evidence.
func (s *Supervisor) declared(ctx context.Context, in store.Receipt) string {
	for _, e := range tools.Effects {
		if e.Tool == in.Tool && e.ReceiptType == in.Type {
			return ""
		}
	}
	if !mcp.IsName(in.Tool) {
		return fmt.Sprintf("%s does not record %q receipts", in.Tool, in.Type)
	}
	r, err := s.db.GetRun(ctx, in.RunID)
	if err != nil {
		return err.Error()
	}
	o, err := DecodeOptions(r)
	if err != nil {
		return err.Error()
	}
	_, servers, err := mcp.Configured(s.cfg.Home, o.MCPConfig)
	if err != nil {
		return err.Error()
	}
	for _, srv := range servers {
		for remote, e := range srv.Effects {
			if mcp.ToolName(srv.Name, remote) == in.Tool && e.Receipt == in.Type {
				return ""
			}
		}
	}
	return fmt.Sprintf("%s is not listed under its MCP server's effects with %q receipts", in.Tool, in.Type)
}

// settle deals with the intents a stopped process left pending: nothing
// carries them out any more. With resend, the user's choice after checking
// they did not arrive, each effect whose outcome is unknown is sent again
// from its recorded arguments, under its own key, and its receipt recorded.
func (s *Supervisor) settle(ctx context.Context, r *store.Run, sink Sink, resend bool) error {
	if _, err := s.db.MarkPendingUnknown(ctx, r.ID, ""); err != nil {
		return err
	}
	if !resend {
		return nil
	}
	receipts, err := s.db.Receipts(ctx, r.ID, "")
	if err != nil {
		return err
	}
	for _, rc := range receipts {
		if rc.State != event.StatusUnknown {
			continue
		}
		if err := s.resend(ctx, r, rc, sink); err != nil {
			return err
		}
	}
	return nil
}

// resend sends one unknown effect again and records what happened.
func (s *Supervisor) resend(ctx context.Context, r *store.Run, rc store.Receipt, sink Sink) error {
	warn := func(format string, args ...any) error {
		e := event.New(event.Warning, event.WarningData{Message: fmt.Sprintf(format, args...)})
		e.PhaseID, e.Attempt = rc.PhaseID, rc.Attempt
		return sink.Emit(ctx, e)
	}
	if len(rc.Args) == 0 {
		return warn("%s %s has an unknown outcome but its arguments were not recorded, so it cannot be sent again", rc.Tool, rc.Key)
	}
	if _, err := s.db.BeginEffect(ctx, store.Receipt{
		Key: rc.Key, RunID: r.ID, PhaseID: rc.PhaseID, Attempt: rc.Attempt, Tool: rc.Tool, Type: rc.Type, Args: rc.Args, Acked: true,
		LeaseOwner: s.cfg.Owner,
	}, true); err != nil {
		return err
	}
	if err := warn("sending %s %s again, as asked with --resend-unknown: %s", rc.Tool, rc.Key, rc.Args); err != nil {
		return err
	}
	res := s.resendEffect(ctx, r, rc)
	for _, e := range res.Events {
		e.PhaseID, e.Attempt = rc.PhaseID, rc.Attempt
		if err := sink.Emit(ctx, e); err != nil {
			return err
		}
	}
	return warn("%s %s: %s", rc.Tool, rc.Key, res.Output)
}

// resendEffect performs one recorded effect again: a built-in tool's, or
// an MCP tool's, whose server is started for it.
func (s *Supervisor) resendEffect(ctx context.Context, r *store.Run, rc store.Receipt) tools.Result {
	if !mcp.IsName(rc.Tool) {
		return tools.ResendEffect(ctx, rc.Tool, rc.Key, rc.Args, s.Getenv)
	}
	fail := func(format string, args ...any) tools.Result {
		return tools.Result{Output: "not sent: " + fmt.Sprintf(format, args...), IsError: true}
	}
	o, err := DecodeOptions(r)
	if err != nil {
		return fail("%v", err)
	}
	f, configured, err := mcp.Configured(s.cfg.Home, o.MCPConfig)
	if err != nil {
		return fail("%v", err)
	}
	confine, err := runner.ServerSandbox(s.cfg.Home, r.Workspace, o.Sandbox, f)
	if err != nil {
		return fail("%v", err)
	}
	name := mcp.ServerOf(rc.Tool)
	used := mcp.Used(configured, []string{mcp.Prefix + name}, nil)
	if len(used) == 0 {
		return fail("MCP server %q is no longer configured", name)
	}
	used[0].Required = true
	servers, err := mcp.Start(ctx, used, mcp.Options{Getenv: s.Getenv, Dir: r.Workspace, Version: "agent/" + s.cfg.Version, Confine: confine})
	if err != nil {
		return fail("%v", err)
	}
	defer servers.Close()
	res, ok := servers.Resend(ctx, rc.Tool, rc.Key, rc.Args)
	if !ok {
		return fail("%s is no side effect of MCP server %q now (check its effects in the configuration)", rc.Tool, name)
	}
	return res
}
