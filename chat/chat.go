// Package chat is agent chat: a conversation in the terminal on a
// session, each message a run of it driven through the supervisor as
// agent run drives one; and the asking of a person at a terminal when a
// run waits (TerminalAsker, GatewayAsker), which agent run shares. The
// CLI hands it the supervisor and the options its flags set; what people
// read is console's.
package chat

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/google/uuid"

	"agent/checkpoint"
	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/store"
	"agent/supervisor"
)

// Config is what a chat needs from its front-end.
type Config struct {
	DB         *store.DB
	Supervisor *supervisor.Supervisor
	// Options are every message's run options, as Prepare resolved them
	// for Workspace.
	Options   supervisor.Options
	Workspace string
	// SessionID goes on in that local session; Continue in the one last
	// active; neither starts a new one at the first message.
	SessionID string
	Continue  bool

	Out, Err io.Writer
	JSON     bool // events as JSON lines on Out, as agent run --json

	// Gateway, if set, keeps the session instead of the local store (DB
	// and Supervisor are then unused), at GatewayAddr.
	Gateway     *api.Stream
	GatewayAddr string
}

// Chat is a conversation on one local session (store.Session.Local).
type Chat struct {
	cfg     Config
	session *store.Session // nil until the first message of a new chat
	compact bool           // the next message compacts the conversation before it (/compact)
	parked  *parkedRun     // through a gateway: the session's run last seen waiting
}

// CompactNext has the next message's run compact the session's earlier
// conversation into a summary before its first request (Options.Compact
// "now"), whatever its size: recorded as context.compacted, it stands
// for those runs in every later message's context.
func (c *Chat) CompactNext() { c.compact = true }

// options are the next message's run options.
func (c *Chat) options() supervisor.Options {
	o := c.cfg.Options
	if c.compact {
		o.Compact = "now"
	}
	return o
}

// Open finds the session the chat goes on in, if any: a gateway's
// session is refused, since its sequence is the gateways' to keep.
func Open(ctx context.Context, cfg Config) (*Chat, error) {
	c := &Chat{cfg: cfg}
	if cfg.Gateway != nil {
		return c, c.openGateway(ctx)
	}
	var err error
	switch {
	case cfg.SessionID != "":
		c.session, err = cfg.DB.GetSession(ctx, cfg.SessionID)
	case cfg.Continue:
		c.session, err = cfg.DB.LastLocalSession(ctx)
	}
	if err != nil {
		return nil, err
	}
	if c.session != nil && !c.session.Local {
		return nil, &GatewaySessionError{SessionID: c.session.ID}
	}
	return c, nil
}

// GatewaySessionError is a local chat asked to go on in a gateway's
// session.
type GatewaySessionError struct{ SessionID string }

func (e *GatewaySessionError) Error() string {
	return fmt.Sprintf("session %s lives in a gateway; chat in it there: agent chat --gateway --session %s", e.SessionID, e.SessionID)
}

// SessionID is the chat's session, "" before a new chat's first message.
func (c *Chat) SessionID() string {
	if c.session == nil {
		return ""
	}
	return c.session.ID
}

// Turn is one message's run as it ended.
type Turn struct {
	RunID string
	End   event.RunFinishedData
}

// Send makes prompt the next run of the session and drives it here to its
// end (or has the gateway drive it), showing its events; ask, if not nil,
// asks a person inline when the run waits. ctx's cause says why a run was
// stopped early (supervisor.Interrupt leaves it resumable, and the
// conversation goes on with it in context).
func (c *Chat) Send(ctx context.Context, prompt string, ask *TerminalAsker) (Turn, error) {
	if c.cfg.Gateway != nil {
		return c.sendGateway(ctx, prompt, ask, c.options())
	}
	return c.send(ctx, prompt, ask, c.options(), nil)
}

// Harness makes request a harness run of the session (a planner, then
// verified phases, shown on the phase board), driven here; confirm, if not
// nil, is asked before a new plan runs (here: a gateway runs its plan
// unasked). Like any harness run, the session's
// earlier messages are not its context, and later messages do not see it.
func (c *Chat) Harness(ctx context.Context, request string, ask *TerminalAsker, confirm func(string) bool) (Turn, error) {
	o := c.options()
	// A harness plans from text: the images wait for the next message.
	o.Harness, o.Images = true, nil
	if c.cfg.Gateway != nil { // the gateway plans and runs it, unasked, as agent harness --gateway
		return c.sendGateway(ctx, request, ask, o)
	}
	o, _, err := c.cfg.Supervisor.Prepare(o, c.cfg.Workspace)
	if err != nil {
		return Turn{}, err
	}
	return c.send(ctx, request, ask, o, confirm)
}

// send creates the session's next run with options o and drives it.
func (c *Chat) send(ctx context.Context, prompt string, ask *TerminalAsker, o supervisor.Options, confirm func(string) bool) (Turn, error) {
	var asker supervisor.Asker
	if ask != nil {
		asker = ask.Ask
	}
	if c.session == nil {
		s := &store.Session{ID: uuid.NewString(), Title: console.OneLine(prompt, 60), Local: true}
		if err := c.cfg.DB.CreateSession(ctx, s); err != nil {
			return Turn{}, err
		}
		c.session = s
	}
	r, err := c.cfg.Supervisor.Create(ctx, supervisor.NewRun{
		Prompt: prompt, Workspace: c.cfg.Workspace, SessionID: c.session.ID, Options: o, Alone: true,
	})
	var held *store.LeaseHeldError
	if errors.As(err, &held) {
		return Turn{}, &BusySessionError{SessionID: c.session.ID, Held: held}
	}
	if err != nil {
		return Turn{}, err
	}
	c.compact = false
	c.cfg.Options.Images = nil // they went with this message
	show := console.NewDisplay(c.cfg.Out, c.cfg.Err, o.Harness, c.cfg.JSON)
	defer show.Close()
	end, err := c.cfg.Supervisor.Drive(ctx, r, supervisor.Drive{Options: o, Show: show.Print, Ask: asker, Confirm: confirm})
	if err != nil {
		return Turn{RunID: r.ID}, err
	}
	return Turn{RunID: r.ID, End: end.Data}, nil
}

// Script is the chat without a terminal: each line of in
// is a message, its output as agent run's. It stops at the first run that
// does not complete (failed, waiting, interrupted), which it returns with
// the last turn, so the command exits as that run did. SIGINT and SIGTERM
// interrupt the run under way, resumably (InterruptOnSignal).
func (c *Chat) Script(ctx context.Context, in io.Reader) (Turn, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var last Turn
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		turnCtx, stop := InterruptOnSignal(ctx)
		turn, err := c.Send(turnCtx, line, nil)
		stop()
		if err != nil || turn.End.ExitCode != 0 {
			return turn, err
		}
		last = turn
	}
	if err := sc.Err(); err != nil {
		return last, fmt.Errorf("read messages from stdin: %w", err)
	}
	if last.RunID == "" && c.session == nil {
		return last, ErrNoMessage // a session gone on with may have been only shown
	}
	if !c.cfg.JSON {
		fmt.Fprintf(c.cfg.Err, "session %s; go on with: agent chat --session %s%s\n", c.SessionID(), console.ShortID(c.SessionID()), c.where())
	}
	return last, nil
}

// where is how the commands that go on name the gateway, if any.
func (c *Chat) where() string {
	if c.cfg.Gateway != nil {
		return " --gateway " + c.cfg.GatewayAddr
	}
	return ""
}

// ErrNoMessage is a script with no message in it.
var ErrNoMessage = errors.New("no message on stdin: each line is one")

// InterruptOnSignal interrupts the run under ctx on SIGINT or SIGTERM so
// it is saved resumable; a second signal exits at once. SIGUSR1 cancels it
// for good (agent mcp serve's cancel). stop gives the signals back.
func InterruptOnSignal(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			if s == syscall.SIGUSR1 {
				cancel(supervisor.Cancel("cancelled (SIGUSR1)"))
			} else {
				cancel(supervisor.Interrupt(""))
			}
		case <-done:
			return
		}
		select {
		case <-sig:
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sig)
		close(done)
		cancel(nil)
	}
}

// ErrNothingWaits is /approve or /deny with no run of the session waiting.
var ErrNothingWaits = errors.New("no run of this session waits for an answer")

// Answer resolves the wait of the session's last run, if it waits (a
// chat closed while it asked, or a script's exit 6), through
// supervisor.Answer as every channel does, and goes on with the run here.
func (c *Chat) Answer(ctx context.Context, d supervisor.Decision, ask *TerminalAsker) (Turn, error) {
	if c.cfg.Gateway != nil {
		return c.answerGateway(ctx, d)
	}
	if c.session == nil {
		return Turn{}, ErrNothingWaits
	}
	runs, err := c.cfg.DB.ListSessionRuns(ctx, c.session.ID)
	if err != nil {
		return Turn{}, err
	}
	if len(runs) == 0 || runs[len(runs)-1].Status != event.StatusWaiting {
		return Turn{}, ErrNothingWaits
	}
	id := runs[len(runs)-1].ID
	if _, err := supervisor.Answer(ctx, c.cfg.DB, id, d); err != nil {
		return Turn{}, err
	}
	r, opts, err := c.cfg.Supervisor.Load(ctx, id)
	if err != nil {
		return Turn{}, err
	}
	if opts, err = c.cfg.Supervisor.Reopen(ctx, r, opts); err != nil {
		return Turn{}, err
	}
	show := console.NewDisplay(c.cfg.Out, c.cfg.Err, false, c.cfg.JSON)
	defer show.Close()
	drive := supervisor.Drive{Options: opts, Resume: true, Show: show.Print}
	if ask != nil {
		drive.Ask = ask.Ask
	}
	end, err := c.cfg.Supervisor.Drive(ctx, r, drive)
	return Turn{RunID: r.ID, End: end.Data}, err
}

// Fork goes on in a new local session holding this one's conversation up
// to seq (0: all of it), as agent sessions fork makes; this one stays.
func (c *Chat) Fork(ctx context.Context, seq int64) error {
	switch {
	case c.session == nil:
		return errors.New("nothing to fork: the session has no message yet")
	case c.cfg.Gateway != nil:
		return c.forkGateway(ctx, seq)
	}
	s, err := c.cfg.DB.ForkSession(ctx, c.session.ID, uuid.NewString(), "", seq)
	if err != nil {
		return err
	}
	c.session = s
	return nil
}

// BusySessionError is a message to a local session one of whose runs
// another live process drives (a second chat on it): both would write the
// session's one sequence. It is a *store.LeaseHeldError (exit 4).
type BusySessionError struct {
	SessionID string
	Held      *store.LeaseHeldError
}

func (e *BusySessionError) Error() string {
	return fmt.Sprintf("session %s is busy: its run %s goes on in another process (%s); wait for it to end, or go on in a copy (/fork)",
		console.ShortID(e.SessionID), e.Held.RunID, e.Held.Owner)
}

func (e *BusySessionError) Unwrap() error { return e.Held }

// Rewind puts back the files the session's last run changed, from its
// checkpoint to on (1: all of them), as agent rewind does.
func (c *Chat) Rewind(ctx context.Context, to int) (checkpoint.Report, error) {
	switch {
	case c.session == nil:
		return checkpoint.Report{}, errors.New("nothing to rewind: the session has no run yet")
	case c.cfg.Gateway != nil:
		return c.rewindGateway(ctx, to)
	}
	runs, err := c.cfg.DB.ListSessionRuns(ctx, c.session.ID)
	if err != nil {
		return checkpoint.Report{}, err
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Kind == store.KindRun && !runs[i].Fork {
			return c.cfg.Supervisor.Rewind(ctx, &runs[i], to, false, nil)
		}
	}
	return checkpoint.Report{}, errors.New("nothing to rewind: the session has no run of its own yet")
}

// Sessions are those the chat can go on in, most recently active first:
// the local store's, or through a gateway its own.
func (c *Chat) Sessions(ctx context.Context) ([]store.SessionView, error) {
	if c.cfg.Gateway != nil {
		return c.gatewaySessions(ctx)
	}
	ss, err := c.cfg.DB.ListSessions(ctx, 20, false)
	var out []store.SessionView
	for _, s := range ss {
		if s.Local {
			out = append(out, s.View())
		}
	}
	return out, err
}

// Runs are the session's runs, oldest first.
func (c *Chat) Runs(ctx context.Context) ([]store.RunView, error) {
	switch {
	case c.session == nil:
		return nil, nil
	case c.cfg.Gateway != nil:
		d, err := c.gatewaySession(ctx, c.session.ID)
		return d.Runs, err
	}
	runs, err := c.cfg.DB.ListSessionRuns(ctx, c.session.ID)
	return c.cfg.DB.RunViews(runs), err
}

// GoOn goes on in session id (a unique prefix), or "" the one last
// active: the next message is its next run.
func (c *Chat) GoOn(ctx context.Context, id string) (*store.Session, error) {
	if c.cfg.Gateway != nil {
		if id == "" {
			ss, err := c.gatewaySessions(ctx)
			if err != nil || len(ss) == 0 {
				return nil, cmp.Or(err, fmt.Errorf("no session in the gateway yet: %w", store.ErrNotFound))
			}
			id = ss[0].ID
		}
		d, err := c.gatewaySession(ctx, id)
		if err != nil {
			return nil, err
		}
		c.session = &store.Session{ID: d.Session.ID, Title: d.Session.Title, Runs: d.Session.Runs}
		return c.session, nil
	}
	var s *store.Session
	var err error
	if id == "" {
		s, err = c.cfg.DB.LastLocalSession(ctx)
	} else {
		s, err = c.cfg.DB.GetSession(ctx, id)
	}
	switch {
	case err != nil:
		return nil, err
	case !s.Local:
		return nil, &GatewaySessionError{SessionID: s.ID}
	}
	c.session = s
	return s, nil
}
