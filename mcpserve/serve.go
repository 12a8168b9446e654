package mcpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/config"
	"agent/event"
	"agent/plan"
	"agent/store"
	"agent/tools"
)

// Package mcpserve is `agent mcp serve`: agent itself as an MCP server on
// stdio (README.md#mcp-tool-servers).
//
// Durability. A tool call lasts seconds and an MCP client stops its server
// when it exits, but a run may take hours. So the server never drives a run
// itself: each run, harness or resume is a detached process of this same
// binary ('agent run --json …', 'agent harness --json --yes …', 'agent
// resume ID --json') in a session of its own (Setsid: what the client sends
// the server's process group does not reach it), with stdin from /dev/null
// and its stdout and stderr in $AGENT_HOME/mcp-serve/RUN_ID.log: a file, not
// a pipe, so nothing breaks when the server goes. It is an ordinary CLI run,
// leased, journaled and ended by the supervisor like any other: 'agent runs
// list' shows it and 'agent resume' continues it. The server learns the run
// id from the child's first line (run.started) and answers wait_s, status
// and events from the store alone, so a later server, or the CLI, sees what
// an earlier one started. cancel signals the run's lease holder: SIGUSR1
// cancels the run for good, SIGTERM (mode interrupt) interrupts it as
// Ctrl-C does, and resume continues it.

const (
	serveDefaultWait  = 30 * time.Second  // run and harness without wait_s
	serveMaxWait      = 300 * time.Second // wait_s is capped here
	serveStartTimeout = 30 * time.Second  // for a child's run.started
	serveCancelWait   = 20 * time.Second  // for a signalled run to stop
	servePoll         = 100 * time.Millisecond

	serveEventsLimit    = 200      // events without limit
	serveEventsMaxLimit = 1000     // limit is capped here
	EventsMaxBytes      = 64 << 10 // of JSON lines in one answer
)

// server is the state of one agent mcp serve.
type server struct {
	db   *store.DB
	home string // AGENT_HOME
	dir  string // $AGENT_HOME/mcp-serve: the runs' logs
	exe  string // this binary
	cwd  string // the default workspace
	log  *slog.Logger
	seq  atomic.Int64 // names the logs of runs not started yet

	mu       sync.Mutex
	children map[string]*serveChild // by run id: the processes this server started
}

// serveChild is a detached run process this server started. The server
// waits for it (no zombies while it lives); nothing else depends on it.
type serveChild struct {
	pid  int
	done chan struct{} // closed once it exited
	err  error         // how it exited, once done
}

func (ch *serveChild) exited() bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch.done:
		return true
	default:
		return false
	}
}

// Config is what a server needs: the store, AGENT_HOME, the binary its
// runs are started with, their default workspace, the version it reports
// and where it logs (stderr: stdout is the protocol).
type Config struct {
	DB      *store.DB
	Home    string
	Exe     string // the agent binary the runs are started with; default this process's
	Cwd     string // the workspace of runs that name none; default the current directory
	Version string
	Log     *slog.Logger
}

// Serve serves MCP on stdin and stdout until the client closes stdin or
// ctx ends; the runs it started go on.
func Serve(ctx context.Context, cfg Config) error {
	var err error
	if cfg.Exe == "" {
		if cfg.Exe, err = os.Executable(); err != nil {
			return fmt.Errorf("find the agent binary: %w", err)
		}
	}
	if cfg.Cwd == "" {
		if cfg.Cwd, err = os.Getwd(); err != nil {
			return fmt.Errorf("find the current directory: %w", err)
		}
	}
	dir := filepath.Join(cfg.Home, "mcp-serve")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &DirError{Path: dir, Err: err}
	}
	s := &server{
		db: cfg.DB, home: cfg.Home, dir: dir, exe: cfg.Exe, cwd: cfg.Cwd,
		log:      cfg.Log.With("component", "mcp-serve"),
		children: map[string]*serveChild{},
	}
	srv := sdk.NewServer(&sdk.Implementation{Name: "agent", Title: "agent: durable LLM agent runs", Version: cfg.Version},
		&sdk.ServerOptions{Instructions: serveInstructions})
	s.addTools(srv)
	s.log.Info("serving MCP on stdio", "agent_home", cfg.Home, "workspace", cfg.Cwd)
	err = srv.Run(ctx, stdioTransport(os.Stdin, os.Stdout, s.log))
	if ctx.Err() != nil || errors.Is(err, io.EOF) {
		err = nil // stopped, or the client closed stdin: the runs go on
	}
	return err
}

// DirError is a directory for the runs' logs that cannot be made.
type DirError struct {
	Path string
	Err  error
}

func (e *DirError) Error() string {
	return fmt.Sprintf("create %s for the runs' logs: %v; fix its permissions or set AGENT_HOME", e.Path, e.Err)
}

func (e *DirError) Unwrap() error { return e.Err }

const serveInstructions = "Runs LLM agents durably with agent. run (or harness, for long tasks split into verified phases) " +
	"starts a run in a workspace and returns its run_id, and its result if it ends within wait_s. The run goes on " +
	"after the call returns, even after this server stops: follow it with status and events, continue a stopped one " +
	"with resume, stop a running one with cancel."

// Input schemas, as the SDK takes them: raw JSON.
var (
	runIDSchema = `"run_id":{"type":"string","description":"the run's id, as run or harness returned it, or a unique prefix of it"}`
	waitSchema  = `"wait_s":{"type":"number","minimum":0,"maximum":300,"description":"seconds to wait for the run to end before answering (at most 300); 0 answers at once"}`
	wsSchema    = `"workspace":{"type":"string","description":"directory the run works in (default: the directory agent mcp serve was started in)"}`

	runSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"prompt":{"type":"string","description":"what the agent should do"},` + wsSchema + `,` +
		`"wait_s":{"type":"number","minimum":0,"maximum":300,"description":"seconds to wait for the run to end before answering (default 30, at most 300); 0 answers at once"}` +
		`},"required":["prompt"],"additionalProperties":false}`)
	harnessSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"request":{"type":"string","description":"the task; a planner splits it into phases (give this or plan)"},` +
		`"plan":{"type":["object","string"],"description":"a mission.json plan (an object, or a string holding one) to run as given, without planning (give this or request)"},` +
		wsSchema + `,` +
		`"wait_s":{"type":"number","minimum":0,"maximum":300,"description":"seconds to wait for the run to end before answering (default 30, at most 300); 0 answers at once"}` +
		`},"additionalProperties":false}`)
	statusSchema = json.RawMessage(`{"type":"object","properties":{` + runIDSchema + `},"required":["run_id"],"additionalProperties":false}`)
	eventsSchema = json.RawMessage(`{"type":"object","properties":{` + runIDSchema + `,` +
		`"after_seq":{"type":"integer","minimum":0,"description":"return events after this seq (default 0: from the start); page on with the next_after_seq of the last answer"},` +
		`"limit":{"type":"integer","minimum":1,"maximum":1000,"description":"at most this many events (default 200); an answer also stops at 64 KB"}` +
		`},"required":["run_id"],"additionalProperties":false}`)
	cancelSchema = json.RawMessage(`{"type":"object","properties":{` + runIDSchema + `,` +
		`"mode":{"type":"string","enum":["cancel","interrupt"],"description":"cancel (default): for good; interrupt: resumable later"}` +
		`},"required":["run_id"],"additionalProperties":false}`)
	resumeSchema = json.RawMessage(`{"type":"object","properties":{` + runIDSchema + `,` + waitSchema +
		`},"required":["run_id"],"additionalProperties":false}`)
)

func (s *server) addTools(srv *sdk.Server) {
	no := false
	s.add(srv, &sdk.Tool{Name: "run", Title: "Start an agent run", InputSchema: runSchema,
		Description: "Start a durable agent run: the model works on prompt in workspace with file tools and bash. " +
			"Returns its run_id, and, if it ends within wait_s, its status, result, reason and exit code. " +
			"The run goes on after the call returns; follow it with status or events."}, s.runTool)
	s.add(srv, &sdk.Tool{Name: "harness", Title: "Start a harness run", InputSchema: harnessSchema,
		Description: "Start a durable harness run for a long task: a planner splits request into phases (or plan gives them), " +
			"each runs in a fresh process and passes only when its evidence verifies. Returns the run_id and, if it ends " +
			"within wait_s, how it ended; status shows the phases."}, s.harnessTool)
	s.add(srv, &sdk.Tool{Name: "status", Title: "A run's status", InputSchema: statusSchema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
		Description: "A run's status (running, completed, failed, interrupted, cancelled), reason, result, turns and token usage, " +
			"whether it can be resumed, and a harness run's phases."}, s.statusTool)
	s.add(srv, &sdk.Tool{Name: "events", Title: "A run's events", InputSchema: eventsSchema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
		Description: "A run's stored events after after_seq, one JSON object per line (messages, tool calls, phases, the end), " +
			"at most limit of them and 64 KB; the last line says the after_seq to page on with."}, s.eventsTool)
	s.add(srv, &sdk.Tool{Name: "resume", Title: "Resume a run", InputSchema: resumeSchema,
		Description: "Continue a run that stopped (interrupted, failed, out of turns, or its process died), as 'agent resume' does: " +
			"finished tool calls are not repeated. Returns at once, or when it ends within wait_s (default 0)."}, s.resumeTool)
	s.add(srv, &sdk.Tool{Name: "cancel", Title: "Stop a running run", InputSchema: cancelSchema,
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, OpenWorldHint: &no},
		Description: "Stop a running run. mode cancel (the default) ends it for good, cancelled; mode interrupt stops it " +
			"as Ctrl-C does, interrupted, and resume continues it later. Answers once it stopped (or after 20 s)."}, s.cancelTool)
}

// toolFunc handles one tool call; an error is said to the client as a
// tool error result, never as a protocol error.
type toolFunc func(ctx context.Context, args json.RawMessage) (*sdk.CallToolResult, error)

func (s *server) add(srv *sdk.Server, t *sdk.Tool, h toolFunc) {
	srv.AddTool(t, func(ctx context.Context, req *sdk.CallToolRequest) (res *sdk.CallToolResult, _ error) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("tool panicked", "tool", t.Name, "panic", p, "stack", string(debug.Stack()))
				res = toolError(fmt.Errorf("internal error in %s: %v", t.Name, p))
			}
		}()
		res, err := h(ctx, req.Params.Arguments)
		if err != nil {
			s.log.Info("tool error", "tool", t.Name, "err", err)
			return toolError(err), nil
		}
		return res, nil
	})
}

// firstLine is an error as one line: a tool result names one problem.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(strings.TrimSpace(err.Error()), "\n")
	return msg
}

func toolError(err error) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: firstLine(err)}}}
}

// jsonResult is v as the call's text (one JSON object) and structured content.
func jsonResult(v any) (*sdk.CallToolResult, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(data)}}, StructuredContent: json.RawMessage(data)}, nil
}

// decodeArgs decodes a call's arguments into dst, naming the argument
// that is wrong or unknown.
func decodeArgs(tool string, raw json.RawMessage, dst any, takes string) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("%s: argument %s must be %s, not %s", tool, typ.Field, kindName(typ.Type), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("%s has no argument %s; it takes %s", tool, strings.TrimPrefix(err.Error(), "json: unknown field "), takes)
	}
	return fmt.Errorf("%s: arguments must be a JSON object of %s: %v", tool, takes, err)
}

func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	}
	return "a " + t.Kind().String()
}

// waitArg is wait_s as a duration: def when absent, at most serveMaxWait.
func waitArg(w *float64, def time.Duration) (time.Duration, error) {
	if w == nil {
		return def, nil
	}
	if *w < 0 {
		return 0, fmt.Errorf("wait_s %v is negative: give the seconds to wait, 0 to answer at once", *w)
	}
	return min(time.Duration(*w*float64(time.Second)), serveMaxWait), nil
}

// workspace resolves a workspace argument as 'agent run --workspace' does,
// against the directory the server was started in.
func (s *server) workspace(dir string) (string, error) {
	if dir == "" {
		return s.cwd, nil
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.cwd, dir)
	}
	if why := tools.MissingDir(dir); why != "" {
		return "", fmt.Errorf("workspace %s: %s; give an existing directory, or none for %s", dir, why, s.cwd)
	}
	return filepath.Clean(dir), nil
}

type runArgs struct {
	Prompt    string   `json:"prompt"`
	Workspace string   `json:"workspace"`
	WaitS     *float64 `json:"wait_s"`
}

func (s *server) runTool(ctx context.Context, raw json.RawMessage) (*sdk.CallToolResult, error) {
	var a runArgs
	if err := decodeArgs("run", raw, &a, "prompt, workspace, wait_s"); err != nil {
		return nil, err
	}
	prompt := strings.TrimSpace(a.Prompt)
	if prompt == "" {
		return nil, errors.New("run needs a prompt: what the agent should do")
	}
	ws, err := s.workspace(a.Workspace)
	if err != nil {
		return nil, err
	}
	wait, err := waitArg(a.WaitS, serveDefaultWait)
	if err != nil {
		return nil, err
	}
	return s.start(ctx, []string{"run", "--json", "--workspace", ws, "--", prompt}, ws, wait)
}

type harnessArgs struct {
	Request   string          `json:"request"`
	Plan      json.RawMessage `json:"plan"`
	Workspace string          `json:"workspace"`
	WaitS     *float64        `json:"wait_s"`
}

func (s *server) harnessTool(ctx context.Context, raw json.RawMessage) (*sdk.CallToolResult, error) {
	var a harnessArgs
	if err := decodeArgs("harness", raw, &a, "request or plan, workspace, wait_s"); err != nil {
		return nil, err
	}
	request := strings.TrimSpace(a.Request)
	var planData []byte
	if p := bytes.TrimSpace(a.Plan); len(p) > 0 && string(p) != "null" {
		var text string
		switch {
		case json.Unmarshal(p, &text) == nil:
			planData = []byte(text)
		case p[0] == '{':
			planData = p
		default:
			return nil, errors.New("harness: plan must be a mission.json object, or a string holding one")
		}
	}
	switch {
	case request != "" && planData != nil:
		return nil, errors.New("harness takes a request or a plan, not both: a plan's objective already says what to do")
	case request == "" && planData == nil:
		return nil, errors.New("harness needs a request (the task; a planner splits it into phases) or a plan (a mission.json object)")
	}
	ws, err := s.workspace(a.Workspace)
	if err != nil {
		return nil, err
	}
	wait, err := waitArg(a.WaitS, serveDefaultWait)
	if err != nil {
		return nil, err
	}
	args := []string{"harness", "--json", "--yes", "--workspace", ws}
	if planData == nil {
		return s.start(ctx, append(args, "--", request), ws, wait)
	}
	if _, err := plan.Parse(planData); err != nil {
		return nil, fmt.Errorf("harness: the plan is not a valid mission.json: %v", err)
	}
	// The child reads the plan before its run starts; the store and the
	// workspace's mission.json keep it from then on.
	path := filepath.Join(s.dir, fmt.Sprintf("plan-%d-%d.json", os.Getpid(), s.seq.Add(1)))
	if err := os.WriteFile(path, planData, 0o600); err != nil {
		return nil, fmt.Errorf("write the plan to %s: %w", path, err)
	}
	defer os.Remove(path)
	return s.start(ctx, append(args, "--plan-file", path), ws, wait)
}

// start starts a new run's process, learns its id, and answers as wait
// says.
func (s *server) start(ctx context.Context, args []string, dir string, wait time.Duration) (*sdk.CallToolResult, error) {
	pending := filepath.Join(s.dir, fmt.Sprintf("start-%d-%d.log", os.Getpid(), s.seq.Add(1)))
	id, ch, err := s.spawn(ctx, args, dir, pending, "")
	if err != nil {
		if ch == nil || ch.exited() {
			_ = os.Remove(pending) // its error says all it wrote
		}
		return nil, err
	}
	logPath := s.logPath(id)
	if err := os.Rename(pending, logPath); err != nil {
		s.log.Warn("name the run's log", "run_id", id, "err", err)
		logPath = pending
	}
	return s.answer(ctx, id, ch, wait, logPath)
}

func (s *server) logPath(runID string) string { return filepath.Join(s.dir, runID+".log") }

// spawn starts agent with args as a detached process whose output is
// appended to logPath, and returns the run id of its run.started (which
// must be want, if given). A process that ends or says nothing within
// serveStartTimeout is an error quoting what it said; the process is
// returned with any error once it was started.
func (s *server) spawn(ctx context.Context, args []string, dir, logPath, want string) (string, *serveChild, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("open the run's log: %w", err)
	}
	offset, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return "", nil, fmt.Errorf("open the run's log: %w", err)
	}
	cmd := exec.Command(s.exe, args...)
	cmd.Args[0] = "agent" // the name the binary answers to, also as a test binary
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	f.Close()
	if err != nil {
		return "", nil, fmt.Errorf("start agent %s: %w", args[0], err)
	}
	ch := &serveChild{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	s.log.Info("started", "command", args[0], "pid", ch.pid, "log", logPath)
	id, err := s.awaitStarted(ctx, args[0], logPath, offset, ch, want)
	if err != nil {
		return "", ch, err
	}
	s.mu.Lock()
	s.children[id] = ch
	s.mu.Unlock()
	s.log.Info("run started", "run_id", id, "pid", ch.pid)
	return id, ch, nil
}

// awaitStarted reads a child's log from offset until its run.started.
func (s *server) awaitStarted(ctx context.Context, command, logPath string, offset int64, ch *serveChild, want string) (string, error) {
	rf, err := os.Open(logPath)
	if err != nil {
		return "", fmt.Errorf("read the run's log: %w", err)
	}
	defer rf.Close()
	if _, err := rf.Seek(offset, io.SeekStart); err != nil {
		return "", fmt.Errorf("read the run's log: %w", err)
	}
	deadline := time.NewTimer(serveStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var partial []byte
	var said []string // the last lines that are no events: what it says on stderr
	for {
		exited := ch.exited()
		chunk, err := io.ReadAll(rf)
		if err != nil {
			return "", fmt.Errorf("read the run's log: %w", err)
		}
		partial = append(partial, chunk...)
		for {
			i := bytes.IndexByte(partial, '\n')
			if i < 0 {
				break
			}
			line := bytes.TrimSpace(partial[:i])
			partial = partial[i+1:]
			var ev event.Event
			switch {
			case json.Unmarshal(line, &ev) == nil && ev.Type != "":
				if ev.Type == event.RunStarted && ev.RunID != "" && (want == "" || ev.RunID == want) {
					return ev.RunID, nil
				}
			case len(line) > 0:
				said = append(said, string(line))
				if len(said) > 5 {
					said = said[1:]
				}
			}
		}
		if exited {
			if len(partial) > 0 {
				said = append(said, string(bytes.TrimSpace(partial)))
			}
			return "", startFailure(command, ch, said)
		}
		select {
		case <-tick.C:
		case <-ch.done:
		case <-deadline.C:
			_ = syscall.Kill(ch.pid, syscall.SIGTERM)
			return "", fmt.Errorf("agent %s (pid %d) did not start a run within %s, and was stopped; see %s", command, ch.pid, serveStartTimeout, logPath)
		case <-ctx.Done():
			return "", fmt.Errorf("the call ended before the run started; agent %s (pid %d) goes on, its output in %s", command, ch.pid, logPath)
		}
	}
}

// startFailure says why a child ended before its run started: the error
// line it printed, and its exit code.
func startFailure(command string, ch *serveChild, said []string) error {
	code := -1
	var exit *exec.ExitError
	if errors.As(ch.err, &exit) {
		code = exit.ExitCode()
	} else if ch.err == nil {
		code = 0
	}
	msg := ""
	for i := len(said) - 1; i >= 0 && msg == ""; i-- {
		if rest, ok := strings.CutPrefix(said[i], "agent: "); ok {
			msg = rest
		}
	}
	if msg == "" && len(said) > 0 {
		msg = said[len(said)-1]
	}
	if msg == "" {
		msg = "it printed nothing"
	}
	return fmt.Errorf("%s (agent %s exited %d before its run started)", msg, command, code)
}

// answer waits up to wait for the run to end, then says where it is.
func (s *server) answer(ctx context.Context, id string, ch *serveChild, wait time.Duration, logPath string) (*sdk.CallToolResult, error) {
	r, err := s.waitEnd(ctx, id, ch, wait)
	if err != nil {
		return nil, err
	}
	rep, err := s.report(ctx, r)
	if err != nil {
		return nil, err
	}
	rep.Log = logPath
	return jsonResult(rep)
}

// waitEnd polls the store until the run is no longer running, its process
// (if this server started it) exited, wait passed or the call ended.
func (s *server) waitEnd(ctx context.Context, id string, ch *serveChild, wait time.Duration) (*store.Run, error) {
	deadline := time.Now().Add(wait)
	var done <-chan struct{}
	if ch != nil {
		done = ch.done
	}
	for {
		exited := ch.exited()
		r, err := s.db.GetRun(context.WithoutCancel(ctx), id)
		if err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if r.Status != event.StatusRunning || exited || left <= 0 || ctx.Err() != nil {
			return r, nil
		}
		select {
		case <-time.After(min(servePoll, left)):
		case <-done:
			done = nil
		case <-ctx.Done():
		}
	}
}

// Report is a run as the tools return it: the one view of a run every
// front-end shows (store.RunView), with what an MCP client needs to
// decide what to do next.
type Report struct {
	store.RunView
	Finished bool `json:"finished"`
	// ExitCode is left out until the run has finished, so a client
	// cannot read a running run's 0 as success.
	ExitCode  *int    `json:"exit_code,omitempty"`
	Phases    []Phase `json:"phases,omitempty"`
	Resumable bool    `json:"resumable"`
	Log       string  `json:"log,omitempty"`
	Note      string  `json:"note,omitempty"` // what cancel did
	Next      string  `json:"next,omitempty"` // what the client can do now
}

type Phase struct {
	ID       string `json:"id"`
	Title    string `json:"title,omitempty"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
}

// report reads what 'agent runs show' shows of a run, without its transcript.
func (s *server) report(ctx context.Context, r *store.Run) (Report, error) {
	rep := Report{RunView: s.db.RunView(r), Log: s.logIfAny(r.ID)}
	running := r.Status == event.StatusRunning
	if !running {
		code := r.ExitCode
		rep.Finished, rep.ExitCode = true, &code
	}
	rep.Resumable = (!running || rep.HolderGone) && r.Status != event.StatusCompleted && r.Status != event.StatusCancelled
	if r.Kind == store.KindHarness {
		st, err := s.db.PlanState(ctx, r.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return rep, err
		}
		if st != nil {
			for _, p := range st.Phases {
				rep.Phases = append(rep.Phases, Phase{ID: p.ID, Title: p.Title, Status: p.Status, Attempts: p.Attempts})
			}
		}
	}
	switch {
	case rep.HolderGone:
		rep.Next = "its process is gone (killed or crashed) and what it did is saved: call resume to continue it"
	case running:
		rep.Next = "still running: call status, or events with after_seq, to follow it; cancel stops it"
	case rep.Resumable:
		rep.Next = "call resume to continue it"
	}
	return rep, nil
}

func (s *server) logIfAny(runID string) string {
	if _, err := os.Stat(s.logPath(runID)); err == nil {
		return s.logPath(runID)
	}
	return ""
}

type runIDArgs struct {
	RunID string `json:"run_id"`
}

// getRun finds the run a run_id argument names.
func (s *server) getRun(ctx context.Context, id string) (*store.Run, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return nil, errors.New("run_id is empty: give the id run or harness returned, or a unique prefix of it")
	}
	r, err := s.db.GetRun(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("no run %q in %s: check run_id (the id run or harness returned, or a unique prefix; 'agent runs list' shows them)",
			id, config.DBPath(s.home))
	case errors.Is(err, store.ErrAmbiguous):
		return nil, err // names the matches and asks for more of the id
	}
	return r, err
}

func (s *server) statusTool(ctx context.Context, raw json.RawMessage) (*sdk.CallToolResult, error) {
	var a runIDArgs
	if err := decodeArgs("status", raw, &a, "run_id"); err != nil {
		return nil, err
	}
	r, err := s.getRun(ctx, a.RunID)
	if err != nil {
		return nil, err
	}
	rep, err := s.report(ctx, r)
	if err != nil {
		return nil, err
	}
	return jsonResult(rep)
}

type eventsArgs struct {
	RunID    string `json:"run_id"`
	AfterSeq int64  `json:"after_seq"`
	Limit    *int   `json:"limit"`
}

// EventsPage is the structured part of an events answer.
type EventsPage struct {
	RunID        string `json:"run_id"`
	Count        int    `json:"count"`
	NextAfterSeq int64  `json:"next_after_seq"`
	More         bool   `json:"more"`
	Status       string `json:"status"`
}

func (s *server) eventsTool(ctx context.Context, raw json.RawMessage) (*sdk.CallToolResult, error) {
	var a eventsArgs
	if err := decodeArgs("events", raw, &a, "run_id, after_seq, limit"); err != nil {
		return nil, err
	}
	if a.AfterSeq < 0 {
		return nil, fmt.Errorf("after_seq %d is negative: give 0 for the first events, or the next_after_seq of the last answer", a.AfterSeq)
	}
	limit := serveEventsLimit
	if a.Limit != nil {
		if *a.Limit < 1 {
			return nil, fmt.Errorf("limit %d: give 1 to %d events", *a.Limit, serveEventsMaxLimit)
		}
		limit = min(*a.Limit, serveEventsMaxLimit)
	}
	r, err := s.getRun(ctx, a.RunID)
	if err != nil {
		return nil, err
	}
	evs, err := s.db.ListEvents(ctx, r.ID, a.AfterSeq, limit+1)
	if err != nil {
		return nil, err
	}
	page := EventsPage{RunID: r.ID, NextAfterSeq: a.AfterSeq, More: len(evs) > limit, Status: r.ShownStatus()}
	if page.More {
		evs = evs[:limit]
	}
	var lines bytes.Buffer
	for _, e := range evs {
		line, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		if lines.Len()+len(line)+1 > EventsMaxBytes {
			if page.Count > 0 {
				page.More = true
				break
			}
			// One event bigger than an answer may be: its envelope, and
			// where to read the rest.
			e.Data = json.RawMessage(fmt.Sprintf(`{"omitted_bytes":%d,"read_it_with":%q}`,
				len(e.Data), fmt.Sprintf("agent runs events %s --after-seq %d --json", r.ID, e.Seq-1)))
			if line, err = json.Marshal(e); err != nil {
				return nil, err
			}
		}
		lines.Write(line)
		lines.WriteByte('\n')
		page.Count++
		page.NextAfterSeq = e.Seq
	}
	var note string
	switch {
	case page.More:
		note = fmt.Sprintf("more events: call events with run_id %s and after_seq %d", r.ID, page.NextAfterSeq)
	case r.Status == event.StatusRunning:
		note = fmt.Sprintf("no more events yet; the run is running: call events with after_seq %d later", page.NextAfterSeq)
	default:
		note = fmt.Sprintf("no more events: the run is %s", page.Status)
	}
	var content []sdk.Content
	if lines.Len() > 0 {
		content = append(content, &sdk.TextContent{Text: lines.String()})
	}
	content = append(content, &sdk.TextContent{Text: note})
	return &sdk.CallToolResult{Content: content, StructuredContent: page}, nil
}

type resumeArgs struct {
	RunID string   `json:"run_id"`
	WaitS *float64 `json:"wait_s"`
}

func (s *server) resumeTool(ctx context.Context, raw json.RawMessage) (*sdk.CallToolResult, error) {
	var a resumeArgs
	if err := decodeArgs("resume", raw, &a, "run_id, wait_s"); err != nil {
		return nil, err
	}
	wait, err := waitArg(a.WaitS, 0)
	if err != nil {
		return nil, err
	}
	r, err := s.getRun(ctx, a.RunID)
	if err != nil {
		return nil, err
	}
	// Whether it may be resumed is agent resume's to say (not resumable,
	// busy): its error comes back as this call's.
	logPath := s.logPath(r.ID)
	id, ch, err := s.spawn(ctx, []string{"resume", r.ID, "--json"}, "", logPath, r.ID)
	if err != nil {
		return nil, err
	}
	return s.answer(ctx, id, ch, wait, logPath)
}

func (s *server) cancelTool(ctx context.Context, raw json.RawMessage) (*sdk.CallToolResult, error) {
	var a struct {
		RunID string `json:"run_id"`
		Mode  string `json:"mode"`
	}
	if err := decodeArgs("cancel", raw, &a, "run_id and mode"); err != nil {
		return nil, err
	}
	// SIGUSR1 cancels a run for good, SIGTERM interrupts it (Ctrl-C).
	sig, sigName, as := syscall.SIGUSR1, "SIGUSR1", "to cancel it"
	switch a.Mode {
	case "", "cancel":
	case "interrupt":
		sig, sigName, as = syscall.SIGTERM, "SIGTERM", "as Ctrl-C does"
	default:
		return nil, fmt.Errorf("cancel: mode %q: use cancel (for good) or interrupt (resumable)", a.Mode)
	}
	r, err := s.getRun(ctx, a.RunID)
	if err != nil {
		return nil, err
	}
	pid, err := s.holder(r)
	if err != nil {
		return nil, err
	}
	note := ""
	if pid == 0 {
		note = "its process was already gone (killed or crashed); what it did is saved"
	} else {
		// The process saves the run cancelled (SIGUSR1) or, as Ctrl-C
		// does, interrupted (SIGTERM), stops its tools, and exits 130.
		switch err := syscall.Kill(pid, sig); {
		case errors.Is(err, syscall.ESRCH):
			note = "its process was already gone; what it did is saved"
		case err != nil:
			return nil, fmt.Errorf("stop run %s: signal its process %d: %w", r.ID, pid, err)
		default:
			s.log.Info("cancel: sent "+sigName, "run_id", r.ID, "pid", pid)
			note = fmt.Sprintf("sent its process (pid %d) %s, %s", pid, sigName, as)
		}
	}
	if pid != 0 {
		s.mu.Lock()
		ch := s.children[r.ID]
		s.mu.Unlock()
		if r, err = s.waitEnd(ctx, r.ID, ch, serveCancelWait); err != nil {
			return nil, err
		}
	}
	if r.Status == event.StatusRunning && pid != 0 && !s.db.HolderGone(r) {
		note += fmt.Sprintf("; it has not stopped within %s: call status to see when it does", serveCancelWait)
	}
	rep, err := s.report(ctx, r)
	if err != nil {
		return nil, err
	}
	rep.Note = note
	return jsonResult(rep)
}

// holder is the pid of the process on this machine that drives a running
// run, 0 if that process is gone, or an error saying why this server may
// not stop it.
func (s *server) holder(r *store.Run) (int, error) {
	if r.Status != event.StatusRunning {
		return 0, fmt.Errorf("run %s is not running: it is %s; there is nothing to cancel", r.ID, r.ShownStatus())
	}
	if r.SessionID != "" {
		return 0, fmt.Errorf("run %s belongs to gateway session %s: stop it through the gateway (run.cancel), not here", r.ID, r.SessionID)
	}
	if r.LeaseOwner == "" {
		return 0, fmt.Errorf("run %s is running but no process holds it yet; try again in a moment", r.ID)
	}
	if s.db.HolderGone(r) {
		return 0, nil
	}
	host, pid, ok := store.OwnerProcess(r.LeaseOwner)
	if !ok {
		return 0, fmt.Errorf("run %s is held by %q, which names no process this server can stop", r.ID, r.LeaseOwner)
	}
	if me, err := os.Hostname(); err != nil || me != host {
		return 0, fmt.Errorf("run %s is driven on host %s, not this one: stop it there", r.ID, host)
	}
	// A pid can be reused: stop only an agent process that drives runs of
	// its own, never a gateway.
	if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil {
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) < 2 || (args[1] != "run" && args[1] != "harness" && args[1] != "resume") {
			return 0, fmt.Errorf("run %s is held by process %d, which is %q, not an agent run, harness or resume: stop it yourself if it is yours",
				r.ID, pid, strings.Join(args, " "))
		}
	}
	return pid, nil
}
