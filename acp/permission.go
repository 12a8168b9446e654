package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/coder/acp-go-sdk"

	"agent/event"
	"agent/supervisor"
)

// The options of a permission the client is asked, as §16's answers.
const (
	optionAllow  = "allow"
	optionAlways = "always"
	optionReject = "reject"
)

// asker asks the client through session/request_permission when a run
// of session s waits for an approval, while the other channels stay open
// (agent approve, a gateway): the first answer wins. A client that goes
// away while asked (or agent acp stopping) leaves the run parked, waiting
// in the store. Another wait is not asked: it waits here for another
// channel or its deadline, and parks as the client goes.
func (a *agent) asker(s *session) supervisor.Asker {
	return func(ctx context.Context, w event.RunWaitingData) (supervisor.Decision, error) {
		s.mu.Lock()
		s.asking = true
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.asking = false
			s.mu.Unlock()
		}()
		if w.Kind != event.WaitApproval {
			// A question, a time or a signal: ACP has no way to ask them;
			// agent answer or agent signal resolve them, or the deadline.
			select {
			case <-a.leaving:
				return supervisor.Decision{}, supervisor.ErrPark
			case <-ctx.Done():
				return supervisor.Decision{}, context.Cause(ctx)
			}
		}
		var args toolArgs
		_ = json.Unmarshal(w.Args, &args)
		u := a.updater(s, false)
		call := sdk.ToolCallUpdate{
			ToolCallId: sdk.ToolCallId(w.CallID), Title: sdk.Ptr(toolTitle(w.Tool, args)), Kind: sdk.Ptr(toolKind(w.Tool)),
			Status: sdk.Ptr(sdk.ToolCallStatusPending), RawInput: json.RawMessage(w.Args),
		}
		if path := u.abs(args.Path); path != "" {
			call.Locations = []sdk.ToolCallLocation{{Path: path}}
		}
		type answer struct {
			resp sdk.RequestPermissionResponse
			err  error
		}
		answered := make(chan answer, 1)
		go func() {
			resp, err := a.conn.RequestPermission(ctx, sdk.RequestPermissionRequest{
				SessionId: sdk.SessionId(s.id), ToolCall: call,
				Options: []sdk.PermissionOption{
					{OptionId: optionAllow, Name: "Allow once", Kind: sdk.PermissionOptionKindAllowOnce},
					{OptionId: optionAlways, Name: fmt.Sprintf("Allow always (%s, for the rest of this run)", w.Rule), Kind: sdk.PermissionOptionKindAllowAlways},
					{OptionId: optionReject, Name: "Reject", Kind: sdk.PermissionOptionKindRejectOnce},
				},
			})
			answered <- answer{resp, err}
		}()
		var resp sdk.RequestPermissionResponse
		select {
		case <-a.leaving:
			return supervisor.Decision{}, supervisor.ErrPark // the client went away: the run waits in the store
		case <-ctx.Done():
			return supervisor.Decision{}, context.Cause(ctx) // another channel answered, or the prompt was cancelled
		case got := <-answered:
			select {
			case <-a.conn.Done():
				// The client went away while asked: park once agent acp
				// knows it (stopAll), so the run is not taken for one
				// that runs.
				<-a.leaving
				return supervisor.Decision{}, supervisor.ErrPark
			default:
			}
			if got.err != nil {
				return supervisor.Decision{}, got.err // the other channels stay open
			}
			resp = got.resp
		}
		if resp.Outcome.Selected == nil {
			// The client cancelled the prompt turn; session/cancel
			// interrupts the run.
			<-ctx.Done()
			return supervisor.Decision{}, context.Cause(ctx)
		}
		d := supervisor.Decision{Via: event.ViaEditor, Decide: supervisor.DecideAllow}
		switch resp.Outcome.Selected.OptionId {
		case optionAlways:
			d.Always = true
		case optionReject:
			d.Decide, d.Text = supervisor.DecideDeny, "rejected in the editor"
		case optionAllow:
		default:
			return supervisor.Decision{}, errors.New("the editor chose an option it was not offered: " + string(resp.Outcome.Selected.OptionId))
		}
		return d, nil
	}
}
