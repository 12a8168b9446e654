package chat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"agent/checkpoint"
	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/store"
	"agent/supervisor"
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
	d, err := c.gatewaySession(ctx, id)
	if err != nil {
		return err
	}
	c.session = &store.Session{ID: d.Session.ID, Title: d.Session.Title}
	if len(d.Runs) == 0 {
		return nil
	}
	return c.replay(ctx, d.Runs[len(d.Runs)-1].ID, 0)
}

// replay shows run runID of the session from after event seq after (0:
// its start), and follows it while it goes on, until it ends or waits.
func (c *Chat) replay(ctx context.Context, runID string, after int64) error {
	show := console.NewDisplay(c.cfg.Out, c.cfg.Err, false, c.cfg.JSON)
	defer show.Close()
	if p, ok := show.(*console.Printer); ok {
		p.ShowPrompts(true) // the answer needs its question
		p.ViaGateway(c.cfg.GatewayAddr)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	err := c.cfg.Gateway.Attach(ctx, c.session.ID, 0, func(api.SessionResumeResult) {}, func(e event.Event) {
		if e.RunID != runID || e.Seq <= after || ctx.Err() != nil {
			return
		}
		c.saw(e)
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
func (c *Chat) sendGateway(ctx context.Context, prompt string, ask *TerminalAsker, o supervisor.Options) (Turn, error) {
	p := api.RunStartParams{Input: prompt, Workspace: c.cfg.Workspace, Options: o}
	if c.session != nil {
		p.SessionID = c.session.ID
	}
	started, err := c.cfg.Gateway.StartRun(ctx, p, console.OneLine(prompt, 60))
	if err != nil {
		return Turn{}, err
	}
	c.compact = false
	c.cfg.Options.Images = nil // they went with this message
	if c.session == nil {
		c.session = &store.Session{ID: started.SessionID, Title: console.OneLine(prompt, 60)}
	}
	show := console.NewDisplay(c.cfg.Out, c.cfg.Err, o.Harness, c.cfg.JSON)
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
	fin, err := c.cfg.Gateway.Follow(started, func(e event.Event) { c.saw(e); show.Print(e); waits.Seen(e) }, interrupt, waits.Parked)
	if errors.Is(err, api.ErrStoppedWaiting) {
		err = nil
	}
	return Turn{RunID: started.RunID, End: fin}, err
}

// The session's slash commands through the gateway: its own methods, as a
// local chat uses the store.

// gatewaySessions are the gateway's sessions (agent chat's local ones
// are not its), most recently active first.
func (c *Chat) gatewaySessions(ctx context.Context) ([]store.SessionView, error) {
	var list api.SessionList
	if err := c.cfg.Gateway.Call(ctx, api.MethodSessionList, api.SessionListParams{}, &list); err != nil {
		return nil, err
	}
	var out []store.SessionView
	for _, s := range list.Sessions {
		if !s.Local {
			out = append(out, s.SessionView)
		}
	}
	return out, nil
}

// gatewaySession is one of the gateway's sessions, with its runs.
func (c *Chat) gatewaySession(ctx context.Context, id string) (api.SessionDetail, error) {
	var d api.SessionDetail
	if err := c.cfg.Gateway.Call(ctx, api.MethodSessionGet, api.SessionParams{SessionID: id}, &d); err != nil {
		return d, err
	}
	if d.Session.Local {
		return d, fmt.Errorf("session %s is agent chat's, in the local store: chat in it without --gateway", d.Session.ID)
	}
	return d, nil
}

// forkGateway is Fork through the gateway's session.fork.
func (c *Chat) forkGateway(ctx context.Context, seq int64) error {
	var s api.SessionInfo
	if err := c.cfg.Gateway.Call(ctx, api.MethodSessionFork, api.SessionForkParams{SessionID: c.session.ID, Seq: seq}, &s); err != nil {
		return err
	}
	c.session = &store.Session{ID: s.ID, Title: s.Title}
	return nil
}

// rewindGateway is Rewind through the gateway's checkpoint.rewind, of
// the session's last run.
func (c *Chat) rewindGateway(ctx context.Context, to int) (checkpoint.Report, error) {
	d, err := c.gatewaySession(ctx, c.session.ID)
	if err != nil || len(d.Runs) == 0 {
		return checkpoint.Report{}, cmp.Or(err, errors.New("nothing to rewind: the session has no run yet"))
	}
	var rep checkpoint.Report
	err = c.cfg.Gateway.Call(ctx, api.MethodCheckpointRewind, api.CheckpointRewindParams{RunID: d.Runs[len(d.Runs)-1].ID, To: to}, &rep)
	return rep, err
}

// answerGateway is Answer through the gateway: wait.answer for the wait
// the chat last saw the session's run park on, then the run followed
// there, where the gateway goes on with it.
func (c *Chat) answerGateway(ctx context.Context, d supervisor.Decision) (Turn, error) {
	w := c.parked
	if w == nil {
		return Turn{}, ErrNothingWaits
	}
	if err := c.cfg.Gateway.Answer(ctx, w.RunID, w.WaitID, d); err != nil {
		return Turn{}, err
	}
	c.parked = nil
	return Turn{RunID: w.RunID}, c.replay(ctx, w.RunID, w.Seq)
}

// parkedRun is a gateway run of the session as the chat last saw it
// park: its wait, at event seq.
type parkedRun struct {
	RunID, WaitID string
	Seq           int64
}

// saw keeps what a followed event says of the session's parked run.
func (c *Chat) saw(e event.Event) {
	var w event.RunWaitingData
	switch {
	case e.Type == event.RunWaiting && e.Decode(&w) == nil:
		c.parked = &parkedRun{RunID: e.RunID, WaitID: w.WaitID, Seq: e.Seq}
	case e.Type == event.WaitResolved, event.IsTerminal(e.Type):
		c.parked = nil
	}
}
