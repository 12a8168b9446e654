// Package acp is agent acp: the Agent Client Protocol (the protocol Zed,
// JetBrains IDEs and Neovim plugins drive an agent with) on stdio, so an
// editor drives durable runs. An ACP session is a local session in the
// store (store.Session.Local, as agent chat's, so agent chat --session
// goes on in it too); each session/prompt is a run of it, driven in this
// process through the supervisor as agent chat drives one; the run's
// events become session/update notifications (updates.go), its approvals
// session/request_permission requests (permission.go). The protocol's
// wire and types are github.com/coder/acp-go-sdk's.
package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	sdk "github.com/coder/acp-go-sdk"
	"github.com/google/uuid"

	"agent/console"
	"agent/event"
	"agent/store"
	"agent/supervisor"
	"agent/tools"
)

// Config is what agent acp needs from its front-end.
type Config struct {
	DB         *store.DB
	Supervisor *supervisor.Supervisor
	// Options are every prompt's run options, before Prepare resolves
	// them for the session's cwd.
	Options supervisor.Options
	// Home is AGENT_HOME: the MCP servers a client passes are written
	// there (AllowClientMCP), as a .mcp.json file of the session.
	Home string
	// AllowClientMCP runs the MCP servers a client passes in session/new
	// and session/load; otherwise they are refused, as a gateway refuses
	// options.mcp_config without --allow-unsandboxed: they would run
	// unsandboxed on this host.
	AllowClientMCP bool
	Version        string
}

// Session modes: a prompt is one run, or a harness of verified phases.
const (
	ModeRun     = "run"
	ModeHarness = "harness"
)

// Serve speaks ACP on in and out until the client goes away, ctx ends or
// SIGTERM or SIGINT arrives (a second one kills at once). Runs still under
// way are then interrupted, resumably (the next prompt goes on with them
// first); one that asks the client a permission parks, waiting in the
// store for any other channel's answer (agent approve, a gateway, the
// next prompt here).
func Serve(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	sig, unwatch := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer unwatch()
	// The runs' context outlives ctx: they are stopped with a cause.
	a := &agent{cfg: cfg, ctx: context.WithoutCancel(ctx), sessions: map[string]*session{}, leaving: make(chan struct{})}
	open := make(chan struct{})
	a.conn = sdk.NewAgentSideConnection(a, out, gatedReader{in, open})
	close(open) // the connection is set: requests may come
	select {
	case <-a.conn.Done():
	case <-sig.Done():
		unwatch()
	}
	a.stopAll()
	a.runs.Wait()
	return nil
}

// gatedReader holds reads until open is closed: the SDK starts reading in
// its constructor, and a request handled before the connection it returns
// is set could not answer through it.
type gatedReader struct {
	r    io.Reader
	open chan struct{}
}

func (g gatedReader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}

// agent is the ACP agent: the sessions this connection made or loaded.
type agent struct {
	cfg     Config
	ctx     context.Context // the prompts' runs'
	conn    *sdk.AgentSideConnection
	runs    sync.WaitGroup // prompts under way
	leaving chan struct{}  // closed once the client is gone or agent acp stops

	mu       sync.Mutex
	sessions map[string]*session
	closed   bool // leaving: no new prompt
}

// session is one ACP session as this connection drives it.
type session struct {
	id      string
	cwd     string
	options supervisor.Options // Prepare'd for cwd, each mode's
	harness supervisor.Options
	mode    string

	mu     sync.Mutex
	cancel context.CancelCauseFunc // the prompt under way, nil if none
	asking bool                    // a permission is asked of the client

	// The tool calls the client was shown (by a prompt's run or a load),
	// and the approval waits' calls: a call is started once, then
	// updated. Only the one prompt under way, or the load, touches them.
	calls map[string]bool
	waits map[string]string
}

var _ sdk.Agent = (*agent)(nil)
var _ sdk.AgentLoader = (*agent)(nil)

func (a *agent) Initialize(ctx context.Context, p sdk.InitializeRequest) (sdk.InitializeResponse, error) {
	return sdk.InitializeResponse{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		AgentCapabilities: sdk.AgentCapabilities{
			LoadSession:        true,
			PromptCapabilities: sdk.PromptCapabilities{Image: true, EmbeddedContext: true},
		},
		AgentInfo:   &sdk.Implementation{Name: "agent", Version: a.cfg.Version},
		AuthMethods: []sdk.AuthMethod{},
	}, nil
}

func (a *agent) Authenticate(ctx context.Context, p sdk.AuthenticateRequest) (sdk.AuthenticateResponse, error) {
	return sdk.AuthenticateResponse{}, nil // nothing to sign in to: the model's key is the operator's
}

func (a *agent) NewSession(ctx context.Context, p sdk.NewSessionRequest) (sdk.NewSessionResponse, error) {
	s, err := a.open(uuid.NewString(), p.Cwd, p.McpServers)
	if err != nil {
		return sdk.NewSessionResponse{}, err
	}
	if err := a.cfg.DB.CreateSession(ctx, &store.Session{ID: s.id, Local: true}); err != nil {
		return sdk.NewSessionResponse{}, err
	}
	a.keep(s)
	return sdk.NewSessionResponse{SessionId: sdk.SessionId(s.id), Modes: s.modes()}, nil
}

// LoadSession replays the session's conversation, everything its runs
// recorded (also what another process did meanwhile), then says how a
// run it left unfinished goes on.
func (a *agent) LoadSession(ctx context.Context, p sdk.LoadSessionRequest) (sdk.LoadSessionResponse, error) {
	st, err := a.cfg.DB.GetSession(ctx, string(p.SessionId))
	if errors.Is(err, store.ErrNotFound) {
		return sdk.LoadSessionResponse{}, sdk.NewInvalidParams(map[string]any{"error": fmt.Sprintf("no session %s in the store", p.SessionId)})
	} else if err != nil {
		return sdk.LoadSessionResponse{}, err
	}
	if !st.Local {
		return sdk.LoadSessionResponse{}, sdk.NewInvalidParams(map[string]any{"error": fmt.Sprintf(
			"session %s lives in a gateway; go on in it there: agent chat --gateway --session %s", st.ID, st.ID)})
	}
	if open, err := a.session(p.SessionId); err == nil && open.busy() {
		return sdk.LoadSessionResponse{}, sdk.NewInvalidRequest(map[string]any{"error": "a prompt of this session is under way here: cancel it first (session/cancel)"})
	}
	s, err := a.open(st.ID, p.Cwd, p.McpServers)
	if err != nil {
		return sdk.LoadSessionResponse{}, err
	}
	if err := a.replay(ctx, s); err != nil {
		return sdk.LoadSessionResponse{}, err
	}
	a.keep(s)
	return sdk.LoadSessionResponse{Modes: s.modes()}, nil
}

// open prepares a session's options for cwd, the workspace, with the MCP
// servers the client passed if the operator allows them.
func (a *agent) open(id, cwd string, servers []sdk.McpServer) (*session, error) {
	if !filepath.IsAbs(cwd) {
		return nil, sdk.NewInvalidParams(map[string]any{"error": fmt.Sprintf("cwd %q must be an absolute path", cwd)})
	}
	if why := tools.MissingDir(cwd); why != "" {
		return nil, sdk.NewInvalidParams(map[string]any{"error": fmt.Sprintf("cwd %s: %s", cwd, why)})
	}
	o := a.cfg.Options
	if len(servers) > 0 {
		if !a.cfg.AllowClientMCP {
			return nil, sdk.NewInvalidParams(map[string]any{"error": "the editor's MCP servers are refused: they would run unsandboxed on this host; " +
				"start agent acp with --allow-client-mcp to run them, or name them in config.toml [mcp_servers]"})
		}
		path, err := writeMCPConfig(a.cfg.Home, id, servers)
		if err != nil {
			return nil, err
		}
		o.MCPConfig = append(append([]string{}, o.MCPConfig...), path)
	}
	s := &session{id: id, mode: ModeRun, calls: map[string]bool{}, waits: map[string]string{}}
	var err error
	if s.options, _, err = a.cfg.Supervisor.Prepare(o, cwd); err != nil {
		return nil, sdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	o.Harness = true
	var ws *tools.Workspace
	if s.harness, ws, err = a.cfg.Supervisor.Prepare(o, cwd); err != nil {
		return nil, sdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	s.cwd = ws.Root()
	return s, nil
}

func (a *agent) keep(s *session) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sessions[s.id] = s
}

func (a *agent) session(id sdk.SessionId) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.sessions[string(id)]; ok {
		return s, nil
	}
	return nil, sdk.NewInvalidParams(map[string]any{"error": fmt.Sprintf("session %s is not open here: session/new or session/load it first", id)})
}

// busy reports whether a prompt of the session is under way.
func (s *session) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancel != nil
}

func (s *session) modes() *sdk.SessionModeState {
	return &sdk.SessionModeState{CurrentModeId: sdk.SessionModeId(s.mode), AvailableModes: []sdk.SessionMode{
		{Id: ModeRun, Name: "Run", Description: sdk.Ptr("each prompt is one durable run: the model and its tools")},
		{Id: ModeHarness, Name: "Harness", Description: sdk.Ptr("each prompt is planned into phases, each verified by its evidence")},
	}}
}

func (a *agent) SetSessionMode(ctx context.Context, p sdk.SetSessionModeRequest) (sdk.SetSessionModeResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return sdk.SetSessionModeResponse{}, err
	}
	if p.ModeId != ModeRun && p.ModeId != ModeHarness {
		return sdk.SetSessionModeResponse{}, sdk.NewInvalidParams(map[string]any{"error": fmt.Sprintf("mode %q: want %s or %s", p.ModeId, ModeRun, ModeHarness)})
	}
	s.mu.Lock()
	s.mode = string(p.ModeId)
	s.mu.Unlock()
	return sdk.SetSessionModeResponse{}, nil
}

// Prompt makes the prompt the session's next run and drives it here to
// its end. A run the session left unfinished (unfinished) goes on first,
// its approvals asked here again; if it does not complete, the prompt
// answers as it ended and the new prompt is not run (the editor sends it
// again). One the person interrupted does not go on, and is the next
// run's context, as in agent chat.
func (a *agent) Prompt(_ context.Context, p sdk.PromptRequest) (sdk.PromptResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return sdk.PromptResponse{}, err
	}
	text, images, err := promptOf(p.Prompt)
	if err != nil {
		return sdk.PromptResponse{}, err
	}
	ctx, cancel := context.WithCancelCause(a.ctx)
	defer cancel(nil)
	s.mu.Lock()
	busy := s.cancel != nil
	if !busy {
		s.cancel = cancel
	}
	o := s.options
	if s.mode == ModeHarness {
		o = s.harness
	}
	s.mu.Unlock()
	if busy {
		return sdk.PromptResponse{}, sdk.NewInvalidRequest(map[string]any{"error": "a prompt of this session is under way: cancel it first (session/cancel)"})
	}
	a.mu.Lock()
	closed := a.closed
	if !closed {
		a.runs.Add(1)
	}
	a.mu.Unlock()
	if closed {
		cancel(nil)
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		return sdk.PromptResponse{}, sdk.NewInternalError(map[string]any{"error": "agent acp is stopping"})
	}
	defer func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		a.runs.Done()
	}()

	if len(images) > 0 && o.Harness {
		return sdk.PromptResponse{}, sdk.NewInvalidParams(map[string]any{"error": "images go with a single run's prompt: a harness plans from text; switch to the run mode"})
	}
	o.Images = images
	if r, err := a.unfinished(ctx, s.id); err != nil {
		return sdk.PromptResponse{}, err
	} else if r != nil {
		end, err := a.goOn(ctx, s, r)
		if err != nil || end.Data.Status != event.StatusCompleted {
			return a.response(r.ID, end, err)
		}
	}
	if err := a.cfg.DB.TitleSession(ctx, s.id, console.OneLine(text, 60)); err != nil {
		return sdk.PromptResponse{}, err
	}
	r, err := a.cfg.Supervisor.Create(ctx, supervisor.NewRun{Prompt: text, Workspace: s.cwd, SessionID: s.id, Options: o, Alone: true})
	var held *store.LeaseHeldError
	if errors.As(err, &held) {
		return sdk.PromptResponse{}, sdk.NewInvalidRequest(map[string]any{"error": fmt.Sprintf(
			"session %s is busy: its run %s goes on in another process (%s); wait for it to end", s.id, held.RunID, held.Owner)})
	} else if err != nil {
		return sdk.PromptResponse{}, err
	}
	end, err := a.drive(ctx, s, r, supervisor.Drive{Options: o})
	return a.response(r.ID, end, err)
}

// unfinished is the session's last run if the next prompt goes on with
// it first: it waits for an approval (asked here) or for nothing any
// more, a dead process left it running, or the editor closed while it
// ran. One the person interrupted (session/cancel) is not: it is the next
// run's context. One that waits for a time, a signal or an answer ACP
// cannot ask waits on; the next prompt is a run of its own.
func (a *agent) unfinished(ctx context.Context, sessionID string) (*store.Run, error) {
	runs, err := a.cfg.DB.ListSessionRuns(ctx, sessionID)
	if err != nil || len(runs) == 0 {
		return nil, err
	}
	r := &runs[len(runs)-1]
	switch {
	case r.Status == event.StatusRunning && a.cfg.DB.Abandoned(*r):
		return r, nil
	case r.Status == event.StatusInterrupted && r.Detail == closedDetail:
		return r, nil
	case r.Status != event.StatusWaiting:
		return nil, nil
	}
	ws, err := a.cfg.DB.Waits(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		if w.Resolution == nil && w.Waiting.Kind != event.WaitApproval {
			return nil, nil
		}
	}
	return r, nil
}

// closedDetail is how a run the editor left while it ran was interrupted:
// the next prompt goes on with it first.
const closedDetail = "the editor closed the connection; the next prompt of the session goes on with it first"

// goOn resumes the session's unfinished run r here.
func (a *agent) goOn(ctx context.Context, s *session, r *store.Run) (supervisor.End, error) {
	r, opts, err := a.cfg.Supervisor.Load(ctx, r.ID)
	if err != nil {
		return supervisor.End{}, err
	}
	if opts, err = a.cfg.Supervisor.Reopen(ctx, r, opts); err != nil {
		return supervisor.End{}, err
	}
	return a.drive(ctx, s, r, supervisor.Drive{Options: opts, Resume: true})
}

// drive drives run r of session s here, its events streamed to the client
// as session/update and its approvals asked of it.
func (a *agent) drive(ctx context.Context, s *session, r *store.Run, d supervisor.Drive) (supervisor.End, error) {
	u := a.updater(s, true)
	d.Show = u.show
	d.Ask = a.asker(s)
	return a.cfg.Supervisor.Drive(ctx, r, d)
}

// response is the prompt's answer for how its run ended: a stop reason,
// or an error saying why the run failed and how it goes on.
func (a *agent) response(runID string, end supervisor.End, err error) (sdk.PromptResponse, error) {
	if err != nil {
		return sdk.PromptResponse{}, err
	}
	if reason, ok := stopReason(end.Data); ok {
		return sdk.PromptResponse{StopReason: reason}, nil
	}
	return sdk.PromptResponse{}, &sdk.RequestError{Code: -32603, Message: fmt.Sprintf("run %s %s (%s): %s",
		runID, end.Data.Status, end.Data.Reason, end.Data.Detail), Data: map[string]any{"run_id": runID, "reason": end.Data.Reason}}
}

// stopReason is the ACP stop reason for how a run ended; false for a run
// that failed, which the prompt answers with an error. No end of ours is
// a model's refusal.
func stopReason(fin event.RunFinishedData) (sdk.StopReason, bool) {
	switch fin.Reason {
	case event.ReasonCompleted, event.ReasonPlanned, "":
		return sdk.StopReasonEndTurn, fin.Status != event.StatusFailed
	case event.ReasonMaxTurns, event.ReasonMaxIterations, event.ReasonToolLoop:
		return sdk.StopReasonMaxTurnRequests, true
	case event.ReasonBudgetExhausted:
		return sdk.StopReasonMaxTokens, true
	case event.ReasonInterrupted, event.ReasonCancelled:
		return sdk.StopReasonCancelled, true
	case event.ReasonWaiting:
		// Parked: the client went away while it was asked. Nobody reads
		// this answer; the run waits in the store.
		return sdk.StopReasonCancelled, true
	}
	return "", false
}

// Cancel interrupts the session's prompt under way, resumably: the run is
// recorded interrupted and the prompt answers cancelled.
func (a *agent) Cancel(ctx context.Context, p sdk.CancelNotification) error {
	s, err := a.session(p.SessionId)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel(supervisor.Interrupt("cancelled in the editor (session/cancel); the next prompt goes on with it in context"))
	}
	return nil
}

// stopAll takes no new prompt and interrupts every one under way once
// the client went away, but those that ask it a permission: they park
// (permission.go).
func (a *agent) stopAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for _, s := range a.sessions {
		s.mu.Lock()
		if s.cancel != nil && !s.asking {
			s.cancel(supervisor.Interrupt(closedDetail))
		}
		s.mu.Unlock()
	}
	// Only then are the askers told, so that one that parks is not
	// taken for one that runs.
	close(a.leaving)
}

// The methods agent acp does not offer.

func (a *agent) CloseSession(ctx context.Context, p sdk.CloseSessionRequest) (sdk.CloseSessionResponse, error) {
	return sdk.CloseSessionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionClose)
}

func (a *agent) ListSessions(ctx context.Context, p sdk.ListSessionsRequest) (sdk.ListSessionsResponse, error) {
	return sdk.ListSessionsResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionList)
}

func (a *agent) ResumeSession(ctx context.Context, p sdk.ResumeSessionRequest) (sdk.ResumeSessionResponse, error) {
	return sdk.ResumeSessionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionResume)
}

func (a *agent) SetSessionConfigOption(ctx context.Context, p sdk.SetSessionConfigOptionRequest) (sdk.SetSessionConfigOptionResponse, error) {
	return sdk.SetSessionConfigOptionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionSetConfigOption)
}
