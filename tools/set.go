// Package tools implements the tools the model works with: reading, writing,
// editing and searching files in a workspace it cannot leave, and running
// shell commands. A Set is what the runner offers the model: it validates
// arguments, runs the tool, and turns every failure (unknown tool, bad JSON,
// a path outside the workspace, even a panic) into an error result the model
// can read and react to, never into a Go error.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"agent/event"
	"agent/sandbox"
)

// Definition describes a tool to the model.
type Definition struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema of the arguments object
}

// Artifact is a file a tool call wrote.
type Artifact struct {
	Path   string // workspace-relative, slash separated
	SHA256 string // hex
	Bytes  int64
}

// Result is the outcome of one tool call.
type Result struct {
	Output    string // exactly what the model sees (already truncated)
	IsError   bool
	Truncated bool
	Artifacts []Artifact // files this call wrote (write_file, edit_file)
	// Images are given to the model besides Output (read_file of an
	// image, an MCP tool's image content), with their bytes.
	Images []event.Image
	// Events are recorded right after the call's result, e.g. the
	// learning.recorded of record_learning.
	Events []event.Event
	// Stop ends the agent loop after this call; Output becomes the final
	// message, or the failure reason when IsError (submit_plan).
	Stop bool
	// Wait asks the loop to wait (the wait tools): the call's result is
	// the wait's answer, once there is one.
	Wait *WaitRequest
	// Task asks the loop for a sub-run (the task tool): the call's result
	// is its final answer.
	Task *TaskRequest
}

// Tool is one tool the model can call.
type Tool interface {
	Definition() Definition
	// ReadOnly reports whether the tool is safe to re-run after a crash.
	ReadOnly() bool
	Run(ctx context.Context, ws *Workspace, args json.RawMessage) Result
}

// Options configures a Set.
type Options struct {
	Allow       []string         // tools offered; empty means all
	Deny        []string         // tools removed from Allow
	BashTimeout time.Duration    // default timeout of a bash call; 0 means 120s
	MaxOutput   int              // byte budget of one result; 0 means 30000
	Sandbox     *sandbox.Sandbox // confines bash; nil runs it unconfined
	// Match, if set, says whether an Allow or Deny entry names a tool
	// (MCP: mcp__SERVER names all of a server's tools); default equality.
	Match func(entry, tool string) bool
	// Open, if set, reports entries that may name no tool here without
	// being an error: the caller checks them (an MCP server that did not
	// start).
	Open func(entry string) bool
	// Gone, if set, says why a tool this set does not have was offered
	// before and is not now (an MCP server's tool list changed), or "".
	Gone func(name string) string
}

// DefaultBashTimeout is the bash timeout when Options.BashTimeout is zero.
const DefaultBashTimeout = 120 * time.Second

// Set is the tools offered to the model in one run. It is immutable after
// NewSet and safe for concurrent use.
type Set struct {
	ws        *Workspace
	maxOutput int
	gone      func(name string) string
	all       map[string]entry // every known tool, enabled or not
	enabled   []entry          // in definition order
}

type entry struct {
	tool   Tool
	def    Definition
	schema schema
}

// UnknownToolError is a name in Options.Allow or Options.Deny that is no
// tool.
type UnknownToolError struct {
	Name  string
	List  string // "allow" or "deny"
	Known []string
}

func (e *UnknownToolError) Error() string {
	return fmt.Sprintf("unknown tool %q in %s list; valid tools: %s", e.Name, e.List, strings.Join(e.Known, ", "))
}

// NewSet returns the builtin tools plus extra, filtered by opts.Allow and
// opts.Deny. Naming a tool that does not exist in Allow or Deny is an error,
// so a typo in --allow-tools does not silently disable everything.
func NewSet(ws *Workspace, opts Options, extra ...Tool) (*Set, error) {
	if ws == nil {
		return nil, errors.New("tools: nil workspace")
	}
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = DefaultMaxOutput
	}
	if opts.BashTimeout <= 0 {
		opts.BashTimeout = DefaultBashTimeout
	}
	s := &Set{ws: ws, maxOutput: opts.MaxOutput, all: map[string]entry{}, gone: opts.Gone}

	var ordered []entry
	for _, t := range append(builtins(opts), extra...) {
		if t == nil {
			return nil, errors.New("tools: nil tool")
		}
		def := t.Definition()
		if def.Name == "" {
			return nil, errors.New("tools: tool with empty name")
		}
		if _, dup := s.all[def.Name]; dup {
			return nil, fmt.Errorf("tools: duplicate tool %q", def.Name)
		}
		sc, err := parseSchema(def.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tools: %s: parameters: %w", def.Name, err)
		}
		e := entry{tool: t, def: def, schema: sc}
		s.all[def.Name] = e
		ordered = append(ordered, e)
	}

	known := make([]string, len(ordered))
	for i, e := range ordered {
		known[i] = e.def.Name
	}
	match := opts.Match
	if match == nil {
		match = func(entry, tool string) bool { return entry == tool }
	}
	names := func(list []string, tool string) bool {
		for _, entry := range list {
			if match(entry, tool) {
				return true
			}
		}
		return false
	}
	for _, list := range []struct {
		flag  string
		names []string
	}{{"allow", opts.Allow}, {"deny", opts.Deny}} {
		for _, n := range list.names {
			if opts.Open != nil && opts.Open(n) || slices.ContainsFunc(known, func(tool string) bool { return match(n, tool) }) {
				continue
			}
			return nil, &UnknownToolError{Name: n, List: list.flag, Known: known}
		}
	}
	allowed := func(name string) bool {
		if len(opts.Allow) > 0 && !names(opts.Allow, name) {
			return false
		}
		return !names(opts.Deny, name)
	}
	for _, e := range ordered {
		if allowed(e.def.Name) {
			s.enabled = append(s.enabled, e)
		}
	}
	return s, nil
}

// builtins returns the workspace tools in the order they are offered.
func builtins(opts Options) []Tool {
	return []Tool{
		&readFile{maxBytes: opts.MaxOutput},
		&writeFile{},
		&editFile{},
		&listFiles{},
		&grepTool{},
		&bashTool{timeout: opts.BashTimeout, maxOutput: opts.MaxOutput, waitDelay: bashWaitDelay, sandbox: opts.Sandbox},
	}
}

// Workspace returns the workspace the tools run in.
func (s *Set) Workspace() *Workspace { return s.ws }

// Definitions returns the enabled tools' definitions: builtins first, then
// extra tools in the order given to NewSet.
func (s *Set) Definitions() []Definition {
	defs := make([]Definition, len(s.enabled))
	for i, e := range s.enabled {
		defs[i] = e.def
	}
	return defs
}

// Names returns the enabled tools' names in definition order.
func (s *Set) Names() []string {
	names := make([]string, len(s.enabled))
	for i, e := range s.enabled {
		names[i] = e.def.Name
	}
	return names
}

// ReadOnly reports whether the named tool is enabled and safe to re-run
// after a crash. Unknown and disabled tools report false.
func (s *Set) ReadOnly(name string) bool {
	e, ok := s.lookup(name)
	return ok && e.tool.ReadOnly()
}

// IsEffect reports whether the named tool is enabled and a side effect
// (the approval rule "effects").
func (s *Set) IsEffect(name string) bool {
	e, ok := s.lookup(name)
	if !ok {
		return false
	}
	_, effect := e.tool.(*effectTool)
	return effect
}

func (s *Set) lookup(name string) (entry, bool) {
	for _, e := range s.enabled {
		if e.def.Name == name {
			return e, true
		}
	}
	return entry{}, false
}

// Run calls the named tool with its JSON arguments as the model sent them.
// It never panics and never fails: every problem becomes an error result,
// and every output is truncated to the Set's byte budget.
func (s *Set) Run(ctx context.Context, name string, args string) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			res = Result{Output: fmt.Sprintf("tool %s crashed: %v", name, r), IsError: true}
		}
		out, cut := Truncate(res.Output, s.maxOutput)
		res.Output = out
		res.Truncated = res.Truncated || cut
	}()

	e, ok := s.lookup(name)
	if !ok {
		avail := strings.Join(s.Names(), ", ")
		if _, known := s.all[name]; known {
			return errorf("tool %q is disabled in this run; available: %s", name, avail)
		}
		if s.gone != nil {
			if why := s.gone(name); why != "" {
				return errorf("%s; available: %s", why, avail)
			}
		}
		return errorf("unknown tool %q; available: %s", name, avail)
	}
	raw := json.RawMessage(args)
	if strings.TrimSpace(args) == "" {
		raw = json.RawMessage("{}")
	}
	if err := e.schema.check(raw); err != nil {
		return errorf("invalid arguments for %s: %v", name, err)
	}
	return e.tool.Run(ctx, s.ws, raw)
}

// errorf builds an error result.
func errorf(format string, a ...any) Result {
	return Result{Output: fmt.Sprintf(format, a...), IsError: true}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// schema is the part of a tool's JSON Schema that argument checking uses.
type schema struct {
	Properties           map[string]json.RawMessage `json:"properties"`
	Required             []string                   `json:"required"`
	AdditionalProperties *bool                      `json:"additionalProperties"`
}

func parseSchema(params json.RawMessage) (schema, error) {
	var sc schema
	if len(params) == 0 {
		return sc, nil
	}
	if err := json.Unmarshal(params, &sc); err != nil {
		return sc, err
	}
	return sc, nil
}

// check verifies that raw is a JSON object holding every required argument
// and, when the schema forbids additional properties, nothing else. Type
// checks are left to each tool's decoding.
func (sc schema) check(raw json.RawMessage) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Errorf("arguments are not valid JSON: %v (at byte %d)", err, syn.Offset)
		}
		return fmt.Errorf("arguments must be a JSON object: %v", err)
	}
	for _, r := range sc.Required {
		if v, ok := obj[r]; !ok || string(v) == "null" {
			return fmt.Errorf("missing required argument %q", r)
		}
	}
	if sc.AdditionalProperties != nil && !*sc.AdditionalProperties {
		var unknown []string
		for k := range obj {
			if _, ok := sc.Properties[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			valid := make([]string, 0, len(sc.Properties))
			for k := range sc.Properties {
				valid = append(valid, k)
			}
			sort.Strings(valid)
			return fmt.Errorf("unknown argument %q; valid arguments: %s", unknown[0], strings.Join(valid, ", "))
		}
	}
	return nil
}

// decodeArgs checks raw against def's schema and decodes it into dst, with
// messages that name the offending argument. Builtins call it so they are
// safe to run outside a Set too.
func decodeArgs(def Definition, raw json.RawMessage, dst any) error {
	if len(strings.TrimSpace(string(raw))) == 0 {
		raw = json.RawMessage("{}")
	}
	sc, err := parseSchema(def.Parameters)
	if err != nil {
		return fmt.Errorf("invalid arguments for %s: %v", def.Name, err)
	}
	if err := sc.check(raw); err != nil {
		return fmt.Errorf("invalid arguments for %s: %v", def.Name, err)
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			return fmt.Errorf("invalid arguments for %s: argument %q must be %s, not %s",
				def.Name, typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
		}
		return fmt.Errorf("invalid arguments for %s: %v", def.Name, err)
	}
	return nil
}

// jsonKind names a Go kind the way a JSON Schema would.
func jsonKind(kind string) string {
	switch {
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "a boolean"
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	}
	return kind
}
