package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"agent/sandbox"
	"agent/tools"
)

// Options are what starting a run's servers needs besides their
// configuration.
type Options struct {
	// Getenv expands references in env and headers; nil means os.Getenv.
	Getenv func(string) string
	// Dir is where a stdio server without cwd runs: the workspace.
	Dir     string
	Version string // told to servers as the client's version
	// Warn receives what does not stop the run: an optional server that
	// did not start, an enabled tool a server does not have.
	Warn func(msg string)
	// Confine makes the sandbox a stdio server runs in (README.md#the-sandbox),
	// with or without the network; nil runs servers unconfined (the run's
	// sandbox is off).
	Confine func(network bool) (*sandbox.Sandbox, error)
}

func (o Options) getenv(name string) string {
	if o.Getenv == nil {
		return os.Getenv(name)
	}
	return o.Getenv(name)
}

func (o Options) warn(format string, args ...any) {
	if o.Warn != nil {
		o.Warn(fmt.Sprintf(format, args...))
	}
}

// StartError is a required server that did not start: the run cannot
// begin (exit 5).
type StartError struct {
	Server string
	Source string
	Err    error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("MCP server %q did not start: %v (configured in %s; fix it, or set required = false to run without it)",
		e.Server, e.Err, e.Source)
}

func (e *StartError) Unwrap() error { return e.Err }

// UnknownToolError is an --allow-tools or --deny-tools entry that names a
// tool, mcp__SERVER__TOOL, which its server did not offer once started:
// bad input, as a builtin tool's name misspelt is (exit 2).
type UnknownToolError struct {
	Entry   string
	List    string   // "allow" or "deny"
	Offered []string // the server's tools, as the model is offered them
}

func (e *UnknownToolError) Error() string {
	offered := "no tool"
	if n := len(e.Offered); n > 0 {
		offered = strings.Join(e.Offered[:min(n, 20)], ", ")
		if n > 20 {
			offered += fmt.Sprintf(" and %d more", n-20)
		}
	}
	return fmt.Sprintf("--%s-tools: unknown tool %q; MCP server %q offers: %s", e.List, e.Entry, ServerOf(e.Entry), offered)
}

// Unknown returns the first entry of allow, then of deny, that names one
// tool of a started server which that server does not offer; nil if none.
// An entry for a whole server, or for one that did not start, is not its
// to judge.
func (s *Servers) Unknown(allow, deny []string) *UnknownToolError {
	if s == nil {
		return nil
	}
	for _, l := range []struct {
		name    string
		entries []string
	}{{"allow", allow}, {"deny", deny}} {
		for _, e := range l.entries {
			for _, c := range s.conns {
				if !IsName(e) || e == Prefix+c.srv.Name || c.srv.Name != ServerOf(e) {
					continue
				}
				var offered []string
				for _, t := range s.tools[c] {
					offered = append(offered, ToolName(c.srv.Name, t.Name))
				}
				if !slices.Contains(offered, e) {
					return &UnknownToolError{Entry: e, List: l.name, Offered: offered}
				}
			}
		}
	}
	return nil
}

// Servers are a run's started servers and their tools.
type Servers struct {
	conns []*conn
	tools map[*conn][]*sdk.Tool
	gone  map[string]string // a tool's model name → its server, for tools a server stopped offering
}

// Limits on what one server can offer: a hostile server cannot flood the
// model's context with tools.
const (
	maxTools       = 256
	maxDescription = 4096
	maxSchema      = 64 << 10
)

// Start starts the servers at once, each within its startup timeout, and
// lists their tools. A required server that fails stops everything
// started and returns a *StartError; an optional one is warned about and
// left out.
func Start(ctx context.Context, servers []Server, opts Options) (*Servers, error) {
	s := &Servers{tools: map[*conn][]*sdk.Tool{}, gone: map[string]string{}}
	type started struct {
		c     *conn
		tools []*sdk.Tool
		err   error
	}
	results := make([]started, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			c := &conn{srv: srv, opts: opts}
			list, err := c.open(ctx)
			results[i] = started{c: c, tools: list, err: err}
		})
	}
	wg.Wait()
	var failed error
	for _, r := range results {
		switch {
		case r.err == nil:
			s.conns = append(s.conns, r.c)
			s.tools[r.c] = r.tools
		case r.c.srv.Required && failed == nil:
			failed = &StartError{Server: r.c.srv.Name, Source: r.c.srv.Source, Err: r.err}
		case !r.c.srv.Required:
			opts.warn("MCP server %q did not start and its tools are not offered: %v", r.c.srv.Name, r.err)
		}
	}
	if failed != nil {
		s.Close()
		return nil, failed
	}
	return s, nil
}

// open starts the server and lists its tools, within the startup timeout.
func (c *conn) open(ctx context.Context) ([]*sdk.Tool, error) {
	s, err := c.start(ctx)
	if err != nil {
		return nil, err
	}
	// Whatever the server said of its tools before this listing, the
	// listing has.
	c.changed.Store(false)
	list, err := c.list(ctx, s, true)
	if err != nil {
		return nil, c.startError(ctx, err, s)
	}
	c.live, c.resources, c.listChanges = s, s.hasResources(), s.listsChanges()
	return list, nil
}

// list lists the session's tools within the startup timeout, as the
// model is offered them; first says it is the run's first listing, whose
// warnings are not said again.
func (c *conn) list(ctx context.Context, s *session, first bool) ([]*sdk.Tool, error) {
	lctx, cancel := context.WithTimeout(ctx, c.srv.StartupTimeout)
	defer cancel()
	var list []*sdk.Tool
	for t, err := range s.cs.Tools(lctx, nil) {
		if err != nil {
			if lctx.Err() == context.DeadlineExceeded {
				err = fmt.Errorf("no answer within %s (startup_timeout_s)", c.srv.StartupTimeout)
			}
			return nil, fmt.Errorf("list its tools: %w", err)
		}
		list = append(list, t)
		if len(list) > maxTools*4 {
			break
		}
	}
	list = c.filter(c.withoutTaskTools(s, list), first)
	if err := c.checkKeyArgs(list); err != nil {
		return nil, err
	}
	return list, nil
}

// withoutTaskTools leaves out, with a warning naming them, the tools the
// server lists as needing MCP tasks (execution.taskSupport "required"):
// agent does not speak tasks, so calling them could only fail.
func (c *conn) withoutTaskTools(s *session, list []*sdk.Tool) []*sdk.Tool {
	var out []*sdk.Tool
	var left []string
	for _, t := range list {
		if !s.tasks.needsTasks(t.Name) {
			out = append(out, t)
			continue
		}
		if !c.taskWarned[t.Name] {
			left = append(left, t.Name)
		}
	}
	if len(left) > 0 {
		if c.taskWarned == nil {
			c.taskWarned = map[string]bool{}
		}
		for _, n := range left {
			c.taskWarned[n] = true
		}
		c.opts.warn("MCP server %q: tools that need MCP tasks, which agent does not support, are not offered: %s", c.srv.Name, strings.Join(left, ", "))
	}
	return out
}

// Refresh lists again, between two model requests, the tools of each
// server that said they changed (notifications/tools/list_changed), and
// of each that says its tools may change and was called since: the SDK
// hands a notification over on a goroutine of its own, which the call's
// result may overtake, and the next request must offer what a call
// changed. It reports whether what the model is offered changed. Each
// change is a warning naming the tools that came, went or changed, so the
// run's journal says why the offer changed; a server that cannot list
// them again keeps its list, with a warning.
func (s *Servers) Refresh(ctx context.Context) bool {
	if s == nil {
		return false
	}
	changed := false
	for _, c := range s.conns {
		said, called := c.changed.Swap(false), c.called.Swap(false)
		if !said && !(called && c.listChanges) {
			continue
		}
		live, err := c.session(ctx)
		var list []*sdk.Tool
		if err == nil {
			list, err = c.list(ctx, live, false)
		}
		if err != nil {
			c.opts.warn("MCP server %q said its tools changed, but they could not be listed again (%v); its tools stay as they were", c.srv.Name, err)
			continue
		}
		added, removed, altered := toolDiff(s.tools[c], list)
		if len(added)+len(removed)+len(altered) == 0 {
			continue
		}
		s.tools[c], changed = list, true
		for _, n := range removed {
			s.gone[ToolName(c.srv.Name, n)] = c.srv.Name
		}
		for _, n := range added {
			delete(s.gone, ToolName(c.srv.Name, n))
		}
		msg := fmt.Sprintf("MCP server %q changed its tools:", c.srv.Name)
		if len(added) > 0 {
			msg += " now also offers " + strings.Join(added, ", ") + ";"
		}
		if len(removed) > 0 {
			msg += " no longer offers " + strings.Join(removed, ", ") + ";"
		}
		if len(altered) > 0 {
			msg += " changed " + strings.Join(altered, ", ") + ";"
		}
		c.opts.warn("%s the next model request offers the new list", msg)
	}
	return changed
}

// toolDiff is the names in now and not in was, the other way round, and
// those in both whose description or input schema differ.
func toolDiff(was, now []*sdk.Tool) (added, removed, altered []string) {
	defs := func(list []*sdk.Tool) map[string]string {
		m := map[string]string{}
		for _, t := range list {
			schema, _ := json.Marshal(t.InputSchema)
			m[t.Name] = t.Description + "\x00" + string(schema)
		}
		return m
	}
	before, after := defs(was), defs(now)
	for _, t := range now {
		def, ok := before[t.Name]
		switch {
		case !ok:
			added = append(added, t.Name)
		case def != after[t.Name]:
			altered = append(altered, t.Name)
		}
	}
	for _, t := range was {
		if _, ok := after[t.Name]; !ok {
			removed = append(removed, t.Name)
		}
	}
	return added, removed, altered
}

// Gone says why the model's tool name, once offered, is not any more: its
// server's tool list changed; "" for any other name.
func (s *Servers) Gone(name string) string {
	if s == nil || s.gone[name] == "" {
		return ""
	}
	return fmt.Sprintf("MCP server %q no longer offers %s: its tool list changed during the run", s.gone[name], name)
}

// checkKeyArgs refuses an effect without key_args on a tool that takes
// arguments: which of them make two calls the same effect is the
// operator's to say. On a tool without arguments, none is as key_args = [].
func (c *conn) checkKeyArgs(list []*sdk.Tool) error {
	for _, t := range list {
		if e, ok := c.srv.Effects[t.Name]; ok && e.KeyArgs == nil && takesArguments(t) {
			return fmt.Errorf("effects.%s needs key_args, the arguments that make two calls the same effect "+
				"(key_args = [] makes it one per run and phase)", t.Name)
		}
	}
	return nil
}

// takesArguments reports whether t's input schema has any property.
func takesArguments(t *sdk.Tool) bool {
	b, _ := json.Marshal(t.InputSchema)
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(b, &schema)
	return len(schema.Properties) > 0
}

// filter keeps the tools enabled_tools and disabled_tools leave, within
// the limits, and warns (the first time: first) about names that match
// nothing.
func (c *conn) filter(list []*sdk.Tool, first bool) []*sdk.Tool {
	warn := c.opts.warn
	if !first {
		warn = func(string, ...any) {}
	}
	has := map[string]bool{}
	for _, t := range list {
		has[t.Name] = true
	}
	for _, n := range c.srv.EnabledTools {
		if !has[n] {
			warn("MCP server %q has no tool %q (enabled_tools in %s)", c.srv.Name, n, c.srv.Source)
		}
	}
	for n := range c.srv.Effects {
		if !has[n] {
			warn("MCP server %q has no tool %q (effects in %s)", c.srv.Name, n, c.srv.Source)
		}
	}
	var out []*sdk.Tool
	seen := map[string]bool{}
	for _, t := range list {
		name := ToolName(c.srv.Name, t.Name)
		switch {
		case len(c.srv.EnabledTools) > 0 && !slices.Contains(c.srv.EnabledTools, t.Name),
			slices.Contains(c.srv.DisabledTools, t.Name):
			continue
		case seen[name]:
			warn("MCP server %q lists tool %q twice; the second is left out", c.srv.Name, t.Name)
			continue
		case len(out) == maxTools:
			warn("MCP server %q offers more than %d tools; the rest are left out (use enabled_tools)", c.srv.Name, maxTools)
			return out
		}
		if schema, err := json.Marshal(t.InputSchema); err != nil || len(schema) > maxSchema {
			warn("MCP server %q: tool %q has an input schema over %d KiB or unreadable; it is left out", c.srv.Name, t.Name, maxSchema>>10)
			continue
		}
		seen[name] = true
		out = append(out, t)
	}
	return out
}

// Close stops every server, each with its whole process group.
func (s *Servers) Close() {
	if s == nil {
		return
	}
	var wg sync.WaitGroup
	for _, c := range s.conns {
		wg.Go(c.close)
	}
	wg.Wait()
}

func (c *conn) close() {
	c.mu.Lock()
	live := c.live
	c.live, c.closed = nil, true
	c.mu.Unlock()
	if live != nil {
		live.stop()
	}
}

// Names are the started servers' names.
func (s *Servers) Names() []string {
	var out []string
	for _, c := range s.conns {
		out = append(out, c.srv.Name)
	}
	return out
}

// Tools are the servers' tools as the model is offered them. A tool
// listed under effects goes through outbox, keyed in scope.
func (s *Servers) Tools(scope tools.EffectScope, outbox tools.Outbox) []tools.Tool {
	if s == nil {
		return nil
	}
	var out []tools.Tool
	for _, c := range s.conns {
		for _, t := range s.tools[c] {
			out = append(out, c.tool(t, scope, outbox))
		}
	}
	return out
}

// Resend performs again a side effect of these servers whose outcome is
// unknown (resume --resend-unknown); ok is false when tool is none of
// theirs.
func (s *Servers) Resend(ctx context.Context, tool, key string, args json.RawMessage) (tools.Result, bool) {
	for _, t := range s.Tools(tools.EffectScope{}, nil) {
		if t.Definition().Name == tool {
			return tools.Resend(ctx, t, key, args)
		}
	}
	return tools.Result{}, false
}

// session returns the live session, restarting a server that died once.
func (c *conn) session(ctx context.Context) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live != nil && !c.live.dead() {
		return c.live, nil
	}
	if c.live != nil { // it exited between calls
		c.live.stop()
		c.live = nil
	}
	switch {
	case c.closed:
		return nil, &errDown{msg: fmt.Sprintf("MCP server %q is stopped: the run is ending", c.srv.Name)}
	case c.restarted:
		return nil, &errDown{msg: fmt.Sprintf("MCP server %q died again after its restart; its tools are unavailable for the rest of this run", c.srv.Name)}
	}
	c.restarted = true
	s, err := c.start(ctx)
	if err != nil {
		return nil, &errDown{msg: fmt.Sprintf("MCP server %q died and could not be restarted: %v", c.srv.Name, err)}
	}
	c.live = s
	c.opts.warn("MCP server %q had died; it was restarted", c.srv.Name)
	return s, nil
}

// callError is a call that failed. sent says whether the request may
// have reached a server that acted on it.
type callError struct {
	err  error
	sent bool
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// call calls one tool within the server's tool timeout.
func (c *conn) call(ctx context.Context, tool string, args json.RawMessage, meta sdk.Meta) (*sdk.CallToolResult, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, &callError{err: err}
	}
	c.called.Store(true)
	ctx, clock, stop := startClock(ctx, c.srv.ToolTimeout)
	defer stop()
	r := c.begin(ctx, clock)
	defer c.end(r)
	if meta == nil {
		meta = sdk.Meta{}
	}
	meta["progressToken"] = r.token
	res, err := s.cs.CallTool(ctx, &sdk.CallToolParams{Meta: meta, Name: tool, Arguments: args})
	var wire *jsonrpc.Error
	switch {
	case err == nil:
		return res, nil
	case samplingAsked(err):
		c.opts.warn("MCP server %q asked for sampling (a completion from the run's model); refused: agent does not support sampling", c.srv.Name)
		return nil, &callError{sent: true, err: fmt.Errorf("MCP server %q could not finish the call: it asked for sampling, and %s", c.srv.Name, SamplingRefused)}
	case errors.As(err, &wire):
		// The server answered with an error: it did not run the tool.
		return nil, &callError{err: fmt.Errorf("MCP server %q refused the call: %s", c.srv.Name, wire.Message)}
	case errors.Is(context.Cause(ctx), errToolTimeout):
		return nil, &callError{sent: true, err: fmt.Errorf("MCP server %q did not answer within %s (tool_timeout_s)", c.srv.Name, c.srv.ToolTimeout)}
	case ctx.Err() != nil:
		return nil, &callError{sent: true, err: fmt.Errorf("the call to MCP server %q was interrupted: %w", c.srv.Name, context.Cause(ctx))}
	}
	// The connection broke: the server died or hung up. The next call
	// restarts it.
	c.mu.Lock()
	if c.live == s {
		c.live = nil
	}
	c.mu.Unlock()
	s.stop()
	why := err.Error()
	if t := s.stderrTail(); t != "" {
		why += "; its stderr ends: " + t
	}
	return nil, &callError{sent: true, err: fmt.Errorf("MCP server %q died during the call (%s); it will be restarted for the next call", c.srv.Name, why)}
}

// Listing is what `agent mcp list` says of one server.
type Listing struct {
	Server Server
	Tools  []ToolInfo
	Err    error // it did not start
}

// MarshalJSON is the listing as `agent mcp list --json` prints it.
func (l Listing) MarshalJSON() ([]byte, error) {
	v := struct {
		Server    string     `json:"server"`
		Source    string     `json:"source"`
		Transport string     `json:"transport"` // stdio or http
		Required  bool       `json:"required"`
		OK        bool       `json:"ok"`
		Error     string     `json:"error,omitempty"`
		Tools     []ToolInfo `json:"tools"`
	}{Server: l.Server.Name, Source: l.Server.Source, Transport: l.Transport(), Required: l.Server.Required, OK: l.Err == nil,
		Tools: append([]ToolInfo{}, l.Tools...)}
	if l.Err != nil {
		v.Error = l.Err.Error()
	}
	return json.Marshal(v)
}

// Transport is how agent speaks to the server: stdio or http.
func (l Listing) Transport() string {
	if l.Server.HTTP() {
		return "http"
	}
	return "stdio"
}

// ToolInfo is one tool of a listing.
type ToolInfo struct {
	Name        string `json:"name"`   // as the model calls it
	Remote      string `json:"remote"` // as the server calls it
	Description string `json:"description,omitempty"`
	ReadOnly    bool   `json:"read_only"`
	Receipt     string `json:"receipt,omitempty"` // a side effect recording this receipt
}

// List starts each server on its own, lists its tools and stops it.
func List(ctx context.Context, servers []Server, opts Options) []Listing {
	out := make([]Listing, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			c := &conn{srv: srv, opts: opts}
			list, err := c.open(ctx)
			out[i] = Listing{Server: srv, Err: err}
			for _, t := range list {
				out[i].Tools = append(out[i].Tools, ToolInfo{
					Name: ToolName(srv.Name, t.Name), Remote: t.Name, Description: t.Description,
					ReadOnly: t.Annotations != nil && t.Annotations.ReadOnlyHint, Receipt: srv.Effects[t.Name].Receipt,
				})
			}
			c.close()
		})
	}
	wg.Wait()
	return out
}
