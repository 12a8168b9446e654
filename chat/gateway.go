package chat

import (
	"context"
	"errors"
	"fmt"
	"os"

	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/store"
)

// A chat through a gateway (Config.Gateway): the session is the gateway's,
// each message a run.start in it followed to its end. Closing the terminal
// mid-turn leaves the turn running there; --continue shows the session's
// last run, then goes on.

// openGateway finds the gateway session the chat goes on in, if any, and
// shows its last run: what a chat that closed mid-turn missed.
func (c *Chat) openGateway(ctx context.Context) error {
	id := c.cfg.SessionID
	if id == "" && c.cfg.Continue {
		var list api.SessionList
		if err := c.cfg.Gateway.Call(ctx, api.MethodSessionList, api.SessionListParams{}, &list); err != nil {
			return err
		}
		for _, s := range list.Sessions {
			if !s.Local {
				id = s.ID
				break
			}
		}
		if id == "" {
			return fmt.Errorf("no session in the gateway yet: %w", store.ErrNotFound)
		}
	}
	if id == "" {
		return nil
	}
	var d api.SessionDetail
	if err := c.cfg.Gateway.Call(ctx, api.MethodSessionGet, api.SessionParams{SessionID: id}, &d); err != nil {
		return err
	}
	if d.Session.Local {
		return fmt.Errorf("session %s is agent chat's, in the local store: chat in it without --gateway", d.Session.ID)
	}
	c.session = &store.Session{ID: d.Session.ID, Title: d.Session.Title}
	if len(d.Runs) == 0 {
		return nil
	}
	return c.replay(ctx, d.Runs[len(d.Runs)-1].ID)
}

// replay shows run runID of the session from its start, and follows it
// while it goes on, until it ends or waits.
func (c *Chat) replay(ctx context.Context, runID string) error {
	show := console.NewDisplay(c.cfg.Out, c.cfg.Err, false, c.cfg.JSON)
	defer show.Close()
	if p, ok := show.(*console.Printer); ok {
		p.ShowPrompts(true) // the answer needs its question
		p.ViaGateway(c.cfg.GatewayAddr)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	err := c.cfg.Gateway.Attach(ctx, c.session.ID, 0, func(api.SessionResumeResult) {}, func(e event.Event) {
		if e.RunID != runID || ctx.Err() != nil {
			return
		}
		show.Print(e)
		if event.IsTerminal(e.Type) || e.Type == event.RunWaiting {
			stop()
		}
	})
	return err
}

// sendGateway is Send through the gateway: run.start in the session (a
// new one for a new chat, titled by the message), followed to its end;
// ctx's end interrupts the run there, resumably.
func (c *Chat) sendGateway(ctx context.Context, prompt string, ask *TerminalAsker) (Turn, error) {
	p := api.RunStartParams{Input: prompt, Workspace: c.cfg.Workspace, Options: c.options()}
	if c.session != nil {
		p.SessionID = c.session.ID
	}
	started, err := c.cfg.Gateway.StartRun(ctx, p, console.OneLine(prompt, 60))
	if err != nil {
		return Turn{}, err
	}
	c.compact = false
	if c.session == nil {
		c.session = &store.Session{ID: started.SessionID, Title: console.OneLine(prompt, 60)}
	}
	show := console.NewDisplay(c.cfg.Out, c.cfg.Err, false, c.cfg.JSON)
	defer show.Close()
	if v, ok := show.(interface{ ViaGateway(string) }); ok {
		v.ViaGateway(c.cfg.GatewayAddr)
	}
	interrupt := make(chan os.Signal, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			interrupt <- os.Interrupt // run.cancel, mode interrupt
		case <-done:
		}
	}()
	waits := NewGatewayAsker(context.WithoutCancel(ctx), c.cfg.Gateway, started.RunID, ask, c.cfg.Err)
	defer waits.Stop()
	fin, err := c.cfg.Gateway.Follow(started, func(e event.Event) { show.Print(e); waits.Seen(e) }, interrupt, waits.Parked)
	if errors.Is(err, api.ErrStoppedWaiting) {
		err = nil
	}
	return Turn{RunID: started.RunID, End: fin}, err
}
