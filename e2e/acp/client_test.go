package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	sdk "github.com/coder/acp-go-sdk"
	"github.com/google/jsonschema-go/jsonschema"

	"agent/e2e/internal/e2etest"
)

// A client of agent acp written against the protocol: the SDK's client
// side over real pipes to the real binary, with every line the agent
// sends checked against ACP's published JSON Schema (testdata/schema.json)
// before the SDK reads it.

// client is one agent acp process and the editor that drives it.
type client struct {
	t    testing.TB
	cmd  *exec.Cmd
	conn *sdk.ClientSideConnection
	in   io.WriteCloser // the agent's stdin
	done chan struct{}  // the agent's stdout ended

	mu      sync.Mutex
	methods map[string]string // the client's requests' methods, by id
	updates []map[string]any  // every session/update's update, in wire order
	asked   []sdk.RequestPermissionRequest
	// permit answers session/request_permission; nil fails the test.
	permit func(sdk.RequestPermissionRequest) sdk.RequestPermissionResponse
}

// startACP starts `agent acp ARGS` in e's workspace.
func startACP(t *testing.T, e *e2etest.Env, args ...string) *client {
	t.Helper()
	cmd := e.Command(append([]string{"acp"}, args...)...)
	cmd.Stderr = e2etest.LogFile(t, "acp-stderr")
	return connect(t, cmd)
}

// connect starts cmd, an agent acp, and connects to it as an editor.
func connect(t testing.TB, cmd *exec.Cmd) *client {
	t.Helper()
	c := &client{t: t, cmd: cmd, methods: map[string]string{}, done: make(chan struct{})}
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	checked, feed := io.Pipe()
	go c.check(out, feed)
	c.conn = sdk.NewClientSideConnection(editor{c}, requestsTo{c}, checked)
	c.conn.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	return c
}

// check reads the agent's stdout a line at a time, validates each message
// against the schema, and hands it on to the SDK.
func (c *client) check(out io.Reader, feed *io.PipeWriter) {
	defer close(c.done)
	defer feed.Close()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		c.validate(line)
		if _, err := feed.Write(append(append([]byte{}, line...), '\n')); err != nil {
			return
		}
	}
}

// validate checks one message of the agent's: as a whole against the
// schema's agent messages, and its params or result against the one type
// its method says.
func (c *client) validate(line []byte) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &msg); err != nil {
		c.t.Errorf("agent acp wrote a line that is not JSON: %v: %s", err, line)
		return
	}
	schemaCheck(c.t, "agent message", line)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case msg.Method == "session/update":
		schemaCheck(c.t, "SessionNotification", msg.Params)
		var p struct {
			Update map[string]any `json:"update"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		c.updates = append(c.updates, p.Update)
	case msg.Method == "session/request_permission":
		schemaCheck(c.t, "RequestPermissionRequest", msg.Params)
	case msg.Method != "":
		c.t.Errorf("agent acp sent an unexpected %s", msg.Method)
	case msg.Result != nil:
		if def, ok := responseTypes[c.methods[string(msg.ID)]]; ok {
			schemaCheck(c.t, def, msg.Result)
		}
	}
}

// responseTypes name the schema's type of each method's result.
var responseTypes = map[string]string{
	"initialize": "InitializeResponse", "session/new": "NewSessionResponse", "session/load": "LoadSessionResponse",
	"session/prompt": "PromptResponse", "session/set_mode": "SetSessionModeResponse",
}

// requestsTo notes the method of each request the client writes, so the
// answer's result is checked against its type.
type requestsTo struct{ c *client }

func (w requestsTo) Write(b []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal([]byte(line), &msg) == nil && msg.Method != "" && msg.ID != nil {
			w.c.mu.Lock()
			w.c.methods[string(msg.ID)] = msg.Method
			w.c.mu.Unlock()
		}
	}
	return w.c.in.Write(b)
}

// editor is the client's side of the protocol: it takes updates (the
// check has noted them) and answers permissions with permit.
type editor struct{ c *client }

func (e editor) SessionUpdate(ctx context.Context, p sdk.SessionNotification) error { return nil }

func (e editor) RequestPermission(ctx context.Context, p sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	e.c.mu.Lock()
	e.c.asked = append(e.c.asked, p)
	permit := e.c.permit
	e.c.mu.Unlock()
	if permit == nil {
		e.c.t.Errorf("agent acp asked a permission nobody expected: %+v", p.ToolCall)
		return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}, nil
	}
	return permit(p), nil
}

func (e editor) ReadTextFile(context.Context, sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	return sdk.ReadTextFileResponse{}, sdk.NewMethodNotFound("fs/read_text_file")
}

func (e editor) WriteTextFile(context.Context, sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	return sdk.WriteTextFileResponse{}, sdk.NewMethodNotFound("fs/write_text_file")
}

func (e editor) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, sdk.NewMethodNotFound("terminal/create")
}

func (e editor) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, sdk.NewMethodNotFound("terminal/kill")
}

func (e editor) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, sdk.NewMethodNotFound("terminal/output")
}

func (e editor) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, sdk.NewMethodNotFound("terminal/release")
}

func (e editor) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, sdk.NewMethodNotFound("terminal/wait_for_exit")
}

// allow answers every permission with the option of kind.
func allow(kind sdk.PermissionOptionKind) func(sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	return func(p sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
		for _, o := range p.Options {
			if o.Kind == kind {
				return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(o.OptionId)}
			}
		}
		panic(fmt.Sprintf("no option of kind %s among %+v", kind, p.Options))
	}
}

func (c *client) setPermit(f func(sdk.RequestPermissionRequest) sdk.RequestPermissionResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.permit = f
}

// initialize is the handshake, checked as a client relies on it.
func (c *client) initialize(ctx context.Context) sdk.InitializeResponse {
	c.t.Helper()
	init, err := c.conn.Initialize(ctx, sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber})
	if err != nil {
		c.t.Fatalf("initialize: %v", err)
	}
	if init.ProtocolVersion != sdk.ProtocolVersionNumber || !init.AgentCapabilities.LoadSession {
		c.t.Fatalf("initialize: protocol %d, loadSession %v; want %d, true", init.ProtocolVersion, init.AgentCapabilities.LoadSession, sdk.ProtocolVersionNumber)
	}
	return init
}

// newSession opens a session in e's workspace.
func (c *client) newSession(ctx context.Context, e *e2etest.Env) sdk.SessionId {
	c.t.Helper()
	s, err := c.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: e.Workspace, McpServers: []sdk.McpServer{}})
	if err != nil {
		c.t.Fatalf("session/new: %v", err)
	}
	return s.SessionId
}

// prompt sends one text prompt and returns its answer.
func (c *client) prompt(ctx context.Context, id sdk.SessionId, text string) (sdk.PromptResponse, error) {
	return c.conn.Prompt(ctx, sdk.PromptRequest{SessionId: id, Prompt: []sdk.ContentBlock{sdk.TextBlock(text)}})
}

// since returns the updates from the n-th on, and how many there are.
func (c *client) since(n int) ([]map[string]any, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]map[string]any{}, c.updates[n:]...), len(c.updates)
}

// kinds says updates as their sessionUpdate words, and a tool call's
// status: "tool_call:in_progress tool_call_update:completed agent_message_chunk".
func kinds(ups []map[string]any) string {
	var out []string
	for i, u := range ups {
		k, _ := u["sessionUpdate"].(string)
		if k == "agent_message_chunk" && i > 0 && ups[i-1]["sessionUpdate"] == k {
			continue // a message streams in several chunks
		}
		if s, ok := u["status"].(string); ok {
			k += ":" + s
		}
		out = append(out, k)
	}
	return strings.Join(out, " ")
}

// text is what the updates of a kind say, joined.
func text(ups []map[string]any, kind string) string {
	var b strings.Builder
	for _, u := range ups {
		if u["sessionUpdate"] == kind {
			if c, ok := u["content"].(map[string]any); ok {
				b.WriteString(fmt.Sprint(c["text"]))
			}
		}
	}
	return b.String()
}

// The schema, loaded once: each type's validator, and the agent's
// messages' (the schema's first anyOf: requests, responses and
// notifications an agent sends).
var (
	schemaOnce sync.Once
	schemaDefs map[string]any
	schemaRoot map[string]any
	schemaErr  error
	resolvedMu sync.Mutex
	resolved   = map[string]*jsonschema.Resolved{}
)

func schemaCheck(t testing.TB, def string, instance []byte) {
	t.Helper()
	schemaOnce.Do(func() {
		b, err := os.ReadFile("testdata/schema.json")
		if err != nil {
			schemaErr = err
			return
		}
		schemaErr = json.Unmarshal(b, &schemaRoot)
		schemaDefs, _ = schemaRoot["$defs"].(map[string]any)
	})
	if schemaErr != nil {
		t.Fatalf("load the ACP schema: %v", schemaErr)
	}
	resolvedMu.Lock()
	rs, ok := resolved[def]
	if !ok {
		var top map[string]any
		if def == "agent message" {
			top = maps(schemaRoot["anyOf"].([]any)[0])
		} else {
			top = map[string]any{"$ref": "#/$defs/" + def}
		}
		top["$schema"], top["$defs"] = schemaRoot["$schema"], schemaDefs
		b, _ := json.Marshal(top)
		var s jsonschema.Schema
		err := json.Unmarshal(b, &s)
		if err == nil {
			rs, err = s.Resolve(nil)
		}
		if err != nil {
			resolvedMu.Unlock()
			t.Fatalf("resolve the ACP schema's %s: %v", def, err)
		}
		resolved[def] = rs
	}
	resolvedMu.Unlock()
	var v any
	if err := json.Unmarshal(instance, &v); err != nil {
		t.Errorf("%s: not JSON: %v", def, err)
		return
	}
	if err := rs.Validate(v); err != nil {
		t.Errorf("agent acp sent a %s the ACP schema refuses: %v\n%s", def, err, instance)
	}
}

func maps(v any) map[string]any {
	m := map[string]any{}
	for k, x := range v.(map[string]any) {
		m[k] = x
	}
	return m
}
