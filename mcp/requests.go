package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/tools"
)

// What a server asks of agent besides answering calls
// (README.md#mcp-tool-servers): it says its tools changed (the run offers
// the new list from its next model request: Servers.Refresh), how far a
// call has come (shown on the call's line and recorded as tool.progress),
// and asks the person something while a call runs (elicitation: a §16
// question, or declined at once when nobody can answer). Sampling is
// refused: agent never lets a server prompt its model. The handlers run
// on the SDK's goroutines; a server's calls are one at a time (the loop
// runs a run's calls in turn), so what a server asks belongs to the call
// it has open.

// client is the SDK client of one session, with agent's answers to what
// the server asks. Setting the elicitation handler advertises the
// capability, so that servers offer the tools that ask; no sampling
// handler is set, so none is advertised.
func (c *conn) client() *sdk.Client {
	cl := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: c.opts.Version}, &sdk.ClientOptions{
		ToolListChangedHandler:      func(context.Context, *sdk.ToolListChangedRequest) { c.changed.Store(true) },
		ProgressNotificationHandler: c.progress,
		ElicitationHandler:          c.elicit,
	})
	cl.AddReceivingMiddleware(c.refuseSampling)
	return cl
}

// running is the call a server has open, as what it asks reaches it.
type running struct {
	token string      // the call's progress token
	call  *tools.Call // the loop's side of the call; nil outside a loop
	ctx   context.Context
	clock *toolClock
	// A call's questions are asked one at a time (a server on the 2026
	// protocol may ask several at once); asked counts them.
	askMu sync.Mutex
	asked int
}

// begin notes the call open on this server, for what the server asks
// while it runs; end forgets it.
func (c *conn) begin(ctx context.Context, clock *toolClock) *running {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.calls++
	r := &running{token: fmt.Sprintf("agent-%d", c.calls), call: tools.CallOf(ctx), ctx: ctx, clock: clock}
	c.inCall = r
	return r
}

func (c *conn) end(r *running) {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if c.inCall == r {
		c.inCall = nil
	}
}

func (c *conn) current() *running {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	return c.inCall
}

// progress passes a notifications/progress for the open call to the loop.
func (c *conn) progress(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	r := c.current()
	if r == nil || r.call == nil || r.call.Progress == nil || req.Params == nil || fmt.Sprint(req.Params.ProgressToken) != r.token {
		return
	}
	r.call.Progress(req.Params.Progress, req.Params.Total, clip(strings.Join(strings.Fields(req.Params.Message), " "), 200))
}

// SamplingRefused is what a server that asks for sampling is told.
const SamplingRefused = "agent does not support sampling: an MCP server cannot ask its model for a completion (sampling/createMessage refused)"

// refuseSampling answers sampling/createMessage, which agent does not
// advertise, with an error that says so, and tells the run.
func (c *conn) refuseSampling(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method != "sampling/createMessage" {
			return next(ctx, method, req)
		}
		c.opts.warn("MCP server %q asked for sampling (a completion from the run's model); refused: agent does not support sampling", c.srv.Name)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: SamplingRefused}
	}
}

// samplingAsked reports whether err is the SDK refusing a sampling
// request a call made on the 2026 protocol (an input request, which no
// middleware sees): the SDK's own words, as it has no error value for it.
func samplingAsked(err error) bool {
	return strings.Contains(err.Error(), "does not support CreateMessage")
}

// maxTries is how often one elicitation is asked again after an answer
// that does not fit its form, before it is declined.
const maxTries = 3

// elicit answers elicitation/create: the person is asked through the
// loop (tools.Call.Ask) while the call's tool_timeout_s stands still; a
// denial declines, a timeout cancels. A form answer is checked against
// the requested schema and asked again when it does not fit.
func (c *conn) elicit(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	r := c.current()
	decline := &sdk.ElicitResult{Action: "decline"}
	switch {
	case req.Params == nil:
		return decline, nil
	case r == nil || r.call == nil || r.call.Ask == nil:
		c.opts.warn("MCP server %q asked for input outside a tool call (%q); declined", c.srv.Name, clip(req.Params.Message, 200))
		return decline, nil
	case req.Params.Mode == "url" || req.Params.URL != "":
		c.opts.warn("MCP server %q asked the person to open %s; declined: agent answers form elicitations only", c.srv.Name, clip(req.Params.URL, 200))
		return decline, nil
	}
	f, err := newForm(req.Params.Message, req.Params.RequestedSchema)
	if err != nil {
		c.opts.warn("MCP server %q asked for input with a form agent cannot read (%v); declined", c.srv.Name, err)
		return decline, nil
	}
	r.askMu.Lock()
	defer r.askMu.Unlock()
	r.clock.pause()
	defer r.clock.resume()
	problem := ""
	for range maxTries {
		r.asked++
		ans, err := r.call.Ask(r.ctx, tools.Question{
			Server: c.srv.Name, Text: f.question(r.call.Name, problem), Options: f.options(), Seq: r.asked,
		})
		switch {
		case err != nil:
			return nil, err
		case ans.Declined:
			return decline, nil
		case ans.TimedOut:
			return &sdk.ElicitResult{Action: "cancel"}, nil
		case strings.EqualFold(strings.TrimSpace(ans.Text), "decline"):
			return decline, nil
		}
		var content map[string]any
		if content, problem = f.parse(ans.Text); problem == "" {
			return &sdk.ElicitResult{Action: "accept", Content: content}, nil
		}
	}
	c.opts.warn("MCP server %q: no answer fitted its form after %d tries (%s); declined", c.srv.Name, maxTries, problem)
	return decline, nil
}

// toolClock is a call's tool_timeout_s, which stands still while the
// server waits for a person (an elicitation): it bounds the server, not
// the person, whose wait has a deadline of its own.
type toolClock struct {
	mu      sync.Mutex
	left    time.Duration
	since   time.Time
	timer   *time.Timer
	paused  int
	expired func()
}

// errToolTimeout is the cause of a call stopped by its tool_timeout_s.
var errToolTimeout = errors.New("tool_timeout_s passed")

// startClock bounds ctx by d of running time; stop releases it.
func startClock(ctx context.Context, d time.Duration) (context.Context, *toolClock, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	k := &toolClock{left: d, since: time.Now(), expired: func() { cancel(errToolTimeout) }}
	k.timer = time.AfterFunc(d, k.expired)
	return ctx, k, func() {
		k.mu.Lock()
		k.timer.Stop()
		k.mu.Unlock()
		cancel(nil)
	}
}

func (k *toolClock) pause() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.paused++; k.paused == 1 && k.timer.Stop() {
		k.left -= time.Since(k.since)
	}
}

func (k *toolClock) resume() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.paused--; k.paused == 0 {
		k.since = time.Now()
		k.timer = time.AfterFunc(max(k.left, 0), k.expired)
	}
}

// taskSniffer reads a server's answers to tools/list as they come, for
// the tools whose execution.taskSupport is "required": the 2025-11 spec's
// task-augmented tools, which agent cannot call (it does not speak MCP
// tasks) and the SDK's Tool does not carry. A stdio server's are read on
// the connection (Connect), an HTTP server's in the response body
// (listingBody).
type taskSniffer struct {
	sdk.Transport // stdio only
	mu            sync.Mutex
	pending       map[jsonrpc.ID]bool
	needs         map[string]bool
}

func newTaskSniffer(t sdk.Transport) *taskSniffer {
	return &taskSniffer{Transport: t, pending: map[jsonrpc.ID]bool{}, needs: map[string]bool{}}
}

func (t *taskSniffer) Connect(ctx context.Context) (sdk.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &sniffedConn{Connection: conn, t: t}, nil
}

// needsTasks reports whether the server listed tool as needing tasks.
func (t *taskSniffer) needsTasks(tool string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.needs[tool]
}

// note reads the result of a tools/list.
func (t *taskSniffer) note(result json.RawMessage) {
	var list struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &list) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tl := range list.Tools {
		if tl.Execution.TaskSupport == "required" {
			t.needs[tl.Name] = true
		}
	}
}

type sniffedConn struct {
	sdk.Connection
	t *taskSniffer
}

func (s *sniffedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/list" && req.IsCall() {
		s.t.mu.Lock()
		s.t.pending[req.ID] = true
		s.t.mu.Unlock()
	}
	return s.Connection.Write(ctx, msg)
}

func (s *sniffedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := s.Connection.Read(ctx)
	resp, ok := msg.(*jsonrpc.Response)
	if err != nil || !ok {
		return msg, err
	}
	s.t.mu.Lock()
	listed := s.t.pending[resp.ID]
	delete(s.t.pending, resp.ID)
	s.t.mu.Unlock()
	if listed {
		s.t.note(resp.Result)
	}
	return msg, err
}

// listingBody is the body of an HTTP response to tools/list, read as the
// SDK reads it: the JSON-RPC answer whole, or an event stream whose data
// lines are messages. What it saw is noted before the SDK has it.
type listingBody struct {
	io.ReadCloser
	t    *taskSniffer
	sse  bool
	buf  []byte
	full bool // past maxFrame: no more is kept
}

func (b *listingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.full {
		b.buf = append(b.buf, p[:n]...)
		b.full = len(b.buf) > maxFrame
	}
	for b.sse && !b.full {
		line, rest, ok := bytes.Cut(b.buf, []byte("\n"))
		if !ok {
			break
		}
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			b.noteMessage(data)
		}
		b.buf = rest
	}
	if !b.sse && !b.full && err == io.EOF {
		b.noteMessage(b.buf)
	}
	return n, err
}

func (b *listingBody) noteMessage(data []byte) {
	var msg struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(data, &msg) == nil && len(msg.Result) > 0 {
		b.t.note(msg.Result)
	}
}
