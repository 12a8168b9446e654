package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"agent/adapter"
	"agent/config"
	"agent/event"
	"agent/hooks"
	"agent/llm"
	"agent/mcp"
	"agent/runner"
	"agent/sandbox"
	"agent/schema"
	"agent/skills"
	"agent/store"
	"agent/tools"
	"agent/vision"
)

// Options say how a run is driven: the flags of `agent run` and `agent
// harness`, and the options of the gateway's run.start. They are stored
// with the run, so a resume, here or in a gateway, drives it the same way.
// Secrets are never part of them.
type Options struct {
	Model         string `json:"model,omitempty"`
	BaseURL       string `json:"base_url,omitempty"`
	ModelAttempts int    `json:"model_attempts,omitempty"`
	// How long to wait for the model: for a data chunk (keep-alive
	// comments do not count), and for a whole call with its retries.
	ModelIdleTimeout Duration `json:"model_idle_timeout,omitempty"`
	ModelCallTimeout Duration `json:"model_call_timeout,omitempty"`
	MaxTurns         int      `json:"max_turns,omitempty"`
	AllowTools       []string `json:"allow_tools,omitempty"`
	DenyTools        []string `json:"deny_tools,omitempty"`
	Until            string   `json:"until,omitempty"`
	MaxIterations    int      `json:"max_iterations,omitempty"`
	Timeout          Duration `json:"timeout,omitempty"`
	// MaxRepeats: the same tool call this many times in a row (a bash or
	// MCP call: with the same result too) stops the loop; 0: 5.
	MaxRepeats int `json:"max_repeats,omitempty"`
	// MaxSubagents is how many task calls of one reply run at once, each
	// in a sub-run (docs/PROTOCOL.md#subagents); 0: 4.
	MaxSubagents int `json:"max_subagents,omitempty"`

	// Context and spend (README.md#context-and-spend). ContextWindow is in tokens (0:
	// a known default for the model); Compact "off" disables compaction,
	// "now" compacts the session's earlier conversation before the run's
	// first request (agent chat's /compact).
	// MaxTokens and MaxCost stop the run once its usage passes them;
	// Prices (USD per million tokens) make MaxCost and cost_usd possible.
	ContextWindow int          `json:"context_window,omitempty"`
	Compact       string       `json:"compact,omitempty"`
	MaxTokens     int          `json:"max_tokens,omitempty"`
	MaxCost       float64      `json:"max_cost,omitempty"`
	Price         *event.Price `json:"price,omitempty"`

	Harness       bool     `json:"harness,omitempty"`
	Parallel      int      `json:"parallel,omitempty"`
	PhaseTimeout  Duration `json:"phase_timeout,omitempty"`
	ContextBudget int      `json:"context_budget,omitempty"`

	// MCPConfig are .mcp.json files (absolute paths) whose servers the run
	// uses besides config.toml's (README.md#mcp-tool-servers).
	MCPConfig []string `json:"mcp_config,omitempty"`

	// Settings is a Claude Code settings.json (an absolute path) whose
	// hooks the run has besides config.toml's [hooks] (docs/PROTOCOL.md#hooks).
	Settings string `json:"settings,omitempty"`

	// Sandbox is the mode of the model's commands: workspace-write (the
	// default, ""), read-only or off; Network gives them the network in a
	// sandboxed mode (README.md#the-sandbox).
	Sandbox string `json:"sandbox,omitempty"`
	Network bool   `json:"network,omitempty"`

	// Cassettes (README.md#record-and-replay): absolute paths.
	Record string `json:"record,omitempty"`
	Replay string `json:"replay,omitempty"`

	// People in the loop (docs/PROTOCOL.md#waits): approval rules (--ask and
	// config.toml's [approvals] ask), how long an approval or a question
	// waits and what its deadline does; the wait tools offered; the
	// longest any wait may be.
	Ask          []string `json:"ask,omitempty"`
	AskTimeout   Duration `json:"ask_timeout,omitempty"`
	AskOnTimeout string   `json:"ask_on_timeout,omitempty"`
	AskHuman     *bool    `json:"ask_human,omitempty"`
	WaitTools    bool     `json:"wait_tools,omitempty"`
	MaxWait      Duration `json:"max_wait,omitempty"`

	// OutputSchema is a JSON Schema the final answer must satisfy: the run
	// completes with it as data.output, or fails with reason schema
	// (README.md#structured-output). The CLI reads it from --output-schema
	// FILE; run.start carries it as JSON.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`

	// Images go with the prompt (docs/PROTOCOL.md#images): --image, and a
	// gateway client's data; on resume, those added go in a message of
	// their own. A front-end gives their bytes, which the store keeps once
	// (Create, Drive); the stored options name them by sha256. Vision says
	// the model sees them; unset, config.toml's vision, else whether the
	// model is known to (vision.Sees).
	Images []event.Image `json:"images,omitempty"`
	Vision *bool         `json:"vision,omitempty"`

	// Tools are the tools the run offers, as Prepare resolved AllowTools
	// and DenyTools; an MCP server's tools, unknown until it starts, as
	// mcp__SERVER or the allowed mcp__SERVER__TOOL names.
	Tools []string `json:"tools,omitempty"`
}

// Duration is a time.Duration written as text, "10m". Text that is no
// duration reads as a negative one, so that Validate names the option.
type Duration time.Duration

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		v = -1
	}
	*d = Duration(v)
	return nil
}

// OptionError is an option that is wrong. Msg names options as {field},
// their JSON names; each front-end says them its own way (Message): the
// CLI as flags, --max-turns, the gateway as options.max_turns.
type OptionError struct {
	Field string // the option at fault, e.g. "max_turns"
	Msg   string // e.g. "{max_iterations} needs {until}, the line that marks the task complete"
}

var fieldRef = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{([a-z_]+)\}`) })

// Message says the error, naming each option with name.
func (e *OptionError) Message(name func(field string) string) string {
	return fieldRef().ReplaceAllStringFunc(e.Msg, func(ref string) string { return name(ref[1 : len(ref)-1]) })
}

func (e *OptionError) Error() string { return e.Message(func(f string) string { return f }) }

func optionErr(field, format string, args ...any) error {
	return &OptionError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks the options on their own; Prepare checks them against
// the machine too.
func (o Options) Validate() error {
	switch {
	case o.MaxTurns < 0:
		return optionErr("max_turns", "{max_turns} must be positive")
	case o.MaxRepeats < 0 || o.MaxRepeats == 1:
		return optionErr("max_repeats", "{max_repeats} must be at least 2: the first call is no repeat")
	case o.MaxSubagents < 0:
		return optionErr("max_subagents", "{max_subagents} must be at least 1; to offer no task tool, deny it ({deny_tools} task)")
	case o.ModelAttempts < 0:
		return optionErr("model_attempts", "{model_attempts} must be positive")
	case o.MaxIterations < 0:
		return optionErr("max_iterations", "{max_iterations} must be positive")
	case o.MaxIterations > 0 && o.Until == "":
		return optionErr("max_iterations", "{max_iterations} needs {until}, the line that marks the task complete")
	case strings.Contains(o.Until, "\n"):
		return optionErr("until", "{until} must be a single line")
	case o.Timeout < 0:
		return optionErr("timeout", "{timeout} must be a positive duration like 10m")
	case o.ModelIdleTimeout < 0:
		return optionErr("model_idle_timeout", "{model_idle_timeout} must be a positive duration like 2m")
	case o.ModelCallTimeout < 0:
		return optionErr("model_call_timeout", "{model_call_timeout} must be a positive duration like 10m")
	case o.Harness && o.Until != "":
		return optionErr("until", "{until} applies to single runs; harness phases set their own in the plan")
	case o.Parallel < 0:
		return optionErr("parallel", "{parallel} must be at least 1")
	case o.Parallel > 0 && !o.Harness:
		return optionErr("parallel", "{parallel} applies to harness runs only ({harness})")
	case o.PhaseTimeout < 0:
		return optionErr("phase_timeout", "{phase_timeout} must be a positive duration like 30m")
	case o.ContextBudget < 0:
		return optionErr("context_budget", "{context_budget} must be positive")
	case o.ContextWindow < 0:
		return optionErr("context_window", "{context_window} must be positive")
	case o.Compact != "" && o.Compact != "auto" && o.Compact != "off" && o.Compact != "now":
		return optionErr("compact", "{compact} is auto, off or now, not %q", o.Compact)
	case o.MaxTokens < 0:
		return optionErr("max_tokens", "{max_tokens} must be positive")
	case o.MaxCost < 0:
		return optionErr("max_cost", "{max_cost} must be positive, in USD")
	case o.MaxCost > 0 && o.Price == nil:
		return optionErr("max_cost", "{max_cost} needs the model's price: add [prices.%q] with prompt_per_mtok and completion_per_mtok to config.toml", o.Model)
	case o.sandboxErr() != nil:
		return optionErr("sandbox", "{sandbox}: %v", o.sandboxErr())
	case o.askErr() != nil:
		return optionErr("ask", "{ask}: %v", o.askErr())
	case o.AskTimeout < 0:
		return optionErr("ask_timeout", "{ask_timeout} must be a positive duration like 24h")
	case o.MaxWait < 0:
		return optionErr("max_wait", "{max_wait} must be a positive duration like 24h")
	case !validOnTimeout(o.AskOnTimeout):
		return optionErr("ask_on_timeout", "{ask_on_timeout} is deny, allow, continue or fail, not %q", o.AskOnTimeout)
	case o.Record != "" && o.Replay != "":
		return optionErr("record", "{record} and {replay} together make no sense: a replayed run makes no model calls to record")
	case o.Harness && len(o.Images) > 0:
		return optionErr("images", "{images} go with a single run's prompt: a harness plans from text")
	case len(o.OutputSchema) == 0:
	case o.Harness:
		return optionErr("output_schema", "{output_schema} applies to single runs; a harness's phases end with their evidence, not one answer")
	case o.Until != "":
		return optionErr("output_schema", "{output_schema} and {until} together cannot both hold: the final answer must be JSON alone, not end with a promise line")
	case o.outputSchemaErr() != nil:
		return optionErr("output_schema", "{output_schema}: %v", o.outputSchemaErr())
	}
	for i, img := range o.Images {
		if img.Data == nil && len(img.SHA256) != 64 {
			return optionErr("images", "{images}[%d] has no data: give the image's bytes, base64-encoded", i)
		}
	}
	return nil
}

// ReadOutputSchema reads an output schema file (--output-schema FILE) as
// the run keeps it; the error names the file.
func ReadOutputSchema(path string) (json.RawMessage, error) {
	s, err := schema.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return s.JSON(), nil
}

func (o Options) outputSchemaErr() error {
	_, err := schema.Parse(o.OutputSchema)
	return err
}

// outputSchema is the run's output schema, nil if it has none (or one
// Validate refuses).
func (o Options) outputSchema() *schema.Schema {
	if len(o.OutputSchema) == 0 {
		return nil
	}
	s, _ := schema.Parse(o.OutputSchema)
	return s
}

// AttachImages reads image files (--image, agent chat's /image) and adds
// them to the run's images.
func (o *Options) AttachImages(paths ...string) error {
	for _, p := range paths {
		img, err := vision.ReadFile(p)
		if err != nil {
			return err
		}
		o.Images = append(o.Images, img)
	}
	return nil
}

// readImages reads what each image given with its bytes is, from them,
// refusing one that is no PNG, JPEG, GIF or WebP image or is too large.
func readImages(o *Options) error {
	for i, img := range o.Images {
		if img.Data == nil {
			continue // named by the run's stored options: the store has it
		}
		read, err := vision.Read(img.Name, img.Data)
		if err != nil {
			return optionErr("images", "{images}: %v", err)
		}
		o.Images[i] = read
	}
	return nil
}

// sees reports whether the run's model sees images.
func (o Options) sees() bool {
	if o.Vision != nil {
		return *o.Vision
	}
	return vision.Sees(o.Model)
}

// Prepare checks o for a run in the workspace dir, against this machine
// and the supervisor's environment, and resolves the tools it offers. Every
// problem is an *OptionError.
func (s *Supervisor) Prepare(o Options, dir string) (Options, *tools.Workspace, error) {
	f, servers, err := s.configured(o)
	if err != nil {
		return o, nil, err
	}
	if err := s.checkHooks(f, o); err != nil {
		return o, nil, err
	}
	spendDefaults(&o, f)
	if err := waitDefaults(&o, f); err != nil {
		return o, nil, err
	}
	if o.Vision == nil {
		o.Vision = f.Vision
	}
	if err := o.Validate(); err != nil {
		return o, nil, err
	}
	if err := readImages(&o); err != nil {
		return o, nil, err
	}
	ws, err := tools.NewWorkspace(dir, config.Private(s.cfg.Home)...)
	if err != nil {
		return o, nil, optionErr("workspace", "{workspace} %v", err)
	}
	if o.Tools, err = s.offeredTools(ws, o, servers); err != nil {
		return o, nil, err
	}
	if err := s.checkModel(o); err != nil {
		return o, nil, err
	}
	return o, ws, nil
}

// configured reads config.toml and o's MCP servers, once per Prepare; a
// server configuration that cannot work is an option error.
func (s *Supervisor) configured(o Options) (config.File, []mcp.Server, error) {
	f, servers, err := mcp.Configured(s.cfg.Home, o.MCPConfig)
	var bad *mcp.ConfigError
	if errors.As(err, &bad) {
		return f, nil, optionErr("mcp_config", "%v", err)
	}
	return f, servers, err
}

// checkHooks refuses hooks that cannot work, in config.toml or the
// settings file, before the run is created.
func (s *Supervisor) checkHooks(f config.File, o Options) error {
	_, err := hooks.Load(f.Hooks, filepath.Join(s.cfg.Home, "config.toml"), o.Settings)
	var bad *hooks.ConfigError
	switch {
	case errors.As(err, &bad) && bad.Source == o.Settings:
		return optionErr("settings", "{settings} %v", err)
	case errors.As(err, &bad):
		return &config.Error{Msg: "config " + err.Error()}
	}
	return err
}

// spendDefaults fills in what config.toml says of the model: its context
// window and its price.
func spendDefaults(o *Options, f config.File) {
	if o.ContextWindow == 0 {
		o.ContextWindow = f.ContextWindow
	}
	if p, ok := f.Prices[o.Model]; ok && o.Price == nil {
		o.Price = &event.Price{PromptPerMTok: p.PromptPerMTok, CompletionPerMTok: p.CompletionPerMTok}
	}
}

// Rebudget gives a stopped run a new budget on top of what it spent
// (resume --max-tokens M, --max-cost C): the options hold the run's total.
func Rebudget(o Options, spent event.Usage, maxTokens int, maxCost float64) Options {
	if maxTokens > 0 {
		o.MaxTokens = spent.Total() + maxTokens
	}
	if maxCost > 0 && o.Price != nil {
		o.MaxCost = o.Price.Cost(spent) + maxCost
	} else if maxCost > 0 {
		o.MaxCost = maxCost // Validate asks for the price
	}
	return o
}

// OfferedTools resolves the allow and deny lists against every tool a run
// of this kind can have: the tools it will offer. A side-effecting tool
// that is not configured is left out unless the allow list names it. MCP
// entries must name a configured server; their tools are resolved when
// the servers start.
func (s *Supervisor) OfferedTools(ws *tools.Workspace, o Options) ([]string, error) {
	_, servers, err := s.configured(o)
	if err != nil {
		return nil, err
	}
	return s.offeredTools(ws, o, servers)
}

func (s *Supervisor) offeredTools(ws *tools.Workspace, o Options, servers []mcp.Server) ([]string, error) {
	for _, l := range []struct {
		field string
		list  []string
	}{{"allow_tools", o.AllowTools}, {"deny_tools", o.DenyTools}} {
		if e := mcp.UnknownServer(servers, l.list); e != "" {
			return nil, optionErr(l.field, "{%s}: %q names MCP server %q, which is not configured (in config.toml [mcp_servers] or {mcp_config})",
				l.field, e, mcp.ServerOf(e))
		}
	}
	extra := append(tools.EffectTools(tools.EffectScope{}, nil, s.Getenv), tools.TaskTool())
	if o.Harness {
		extra = append(extra, tools.RecordTools()...)
	}
	allow := o.AllowTools
	if o.asksHuman() && !o.Harness {
		extra = append(extra, tools.AskHumanTool())
		allow = withNames(allow, tools.AskHumanName)
	}
	if o.WaitTools {
		extra = append(extra, tools.WaitTools()...)
		allow = withNames(allow, tools.WaitUntilName, tools.WaitForSignalName)
	}
	catalog, _ := skills.Find(ws, s.cfg.Home) // the run says what it skips, as events
	defer catalog.Close()
	if len(catalog.Skills()) > 0 {
		extra = append(extra, catalog.Tool())
	}
	deny := tools.WithoutUnconfigured(o.AllowTools, o.DenyTools, s.Getenv)
	set, err := tools.NewSet(ws, tools.Options{Allow: allow, Deny: deny, Match: mcp.Matches, Open: runner.MayBeAbsent}, extra...)
	var unknown *tools.UnknownToolError
	switch {
	case errors.As(err, &unknown):
		field := "allow_tools"
		if unknown.List == "deny" {
			field = "deny_tools"
		}
		return nil, optionErr(field, "{%s}: unknown tool %q; valid tools: %s", field, unknown.Name, strings.Join(unknown.Known, ", "))
	case err != nil:
		return nil, err
	}
	names := append(set.Names(), mcp.Entries(servers, o.AllowTools, o.DenyTools)...)
	if len(names) == 0 {
		return nil, optionErr("allow_tools", "{allow_tools} and {deny_tools} leave no tool")
	}
	return names, nil
}

// checkModel fails early, before anything is written or requested, when
// the model cannot possibly be reached.
func (s *Supervisor) checkModel(o Options) error {
	if o.Replay != "" {
		f, err := os.Open(o.Replay)
		if err != nil {
			return optionErr("replay", "{replay}: %v", err)
		}
		defer f.Close()
		if _, err := llm.NewReplayer(f, ""); err != nil {
			return optionErr("replay", "{replay} %s: %v", o.Replay, err)
		}
		return nil
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if from := s.cfg.BaseURLFrom; from != "" && o.BaseURL == s.cfg.BaseURL {
			return optionErr("base_url", "invalid base URL %q in %s: want http(s)://host[:port]/v1; fix it there, or override it with {base_url}", o.BaseURL, from)
		}
		return optionErr("base_url", "invalid base URL %q: want http(s)://host[:port]/v1 in {base_url}", o.BaseURL)
	}
	if s.apiKey == "" && !isLoopback(u.Hostname()) {
		return optionErr("base_url", "OPENAI_API_KEY is not set; export it, point {base_url} at a local server, or use {replay} FILE")
	}
	return nil
}

// isLoopback reports whether host is this machine, where local model
// servers need no key.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (o Options) sandboxErr() error {
	_, err := sandbox.ParseMode(o.Sandbox)
	return err
}

// sandboxMode is the run's sandbox mode, the default when it says none.
func (o Options) sandboxMode() sandbox.Mode {
	m, err := sandbox.ParseMode(o.Sandbox)
	if err != nil {
		return sandbox.Default // Validate refuses it first
	}
	return m
}

// SandboxSummary says how the run's commands are confined, e.g.
// "workspace-write, network off".
func (o Options) SandboxSummary() string {
	m := o.sandboxMode()
	switch {
	case m == sandbox.Off:
		return "off: commands run unconfined, with the network"
	case o.Network:
		return string(m) + ", network on"
	}
	return string(m) + ", network off"
}

// network reports whether the model's commands have the network.
func (o Options) network() bool { return o.Network || o.sandboxMode() == sandbox.Off }

// model is the model settings of the run's loops and children.
func (o Options) model() adapter.Model {
	return adapter.Model{
		Name: o.Model, BaseURL: o.BaseURL, MaxAttempts: o.ModelAttempts, Record: o.Record, Replay: o.Replay,
		IdleTimeoutMS: time.Duration(o.ModelIdleTimeout).Milliseconds(), CallTimeoutMS: time.Duration(o.ModelCallTimeout).Milliseconds(),
	}
}

// encode is what the run keeps (runs.config_json): its images by sha256,
// without their bytes, which the store keeps once.
func (o Options) encode() json.RawMessage {
	o.Images = slices.Clone(o.Images)
	for i := range o.Images {
		o.Images[i].Data = nil
	}
	raw, err := json.Marshal(o)
	if err != nil {
		panic("supervisor: marshal options: " + err.Error()) // plain fields: cannot fail
	}
	return raw
}

// DecodeOptions reads back the options a run was stored with, including
// those of runs stored before there was one options type.
func DecodeOptions(r *store.Run) (Options, error) {
	var o Options
	if len(bytes.TrimSpace(r.Config)) == 0 {
		return o, fmt.Errorf("run %s has no stored options", r.ID)
	}
	var probe struct {
		Model json.RawMessage `json:"model"`
	}
	if err := json.Unmarshal(r.Config, &probe); err != nil {
		return o, fmt.Errorf("run %s has unreadable options: %w", r.ID, err)
	}
	if bytes.HasPrefix(bytes.TrimSpace(probe.Model), []byte("{")) {
		return decodeLegacyHarness(r)
	}
	if err := json.Unmarshal(r.Config, &o); err != nil {
		return o, fmt.Errorf("run %s has unreadable options: %w", r.ID, err)
	}
	o.Harness = r.Kind == store.KindHarness
	return o, nil
}

// decodeLegacyHarness reads a harness run stored with its model settings
// as an object, as versions before one options type stored them.
func decodeLegacyHarness(r *store.Run) (Options, error) {
	var h struct {
		Model         adapter.Model `json:"model"`
		MaxTurns      int           `json:"max_turns"`
		Tools         []string      `json:"tools"`
		Parallel      int           `json:"parallel"`
		PhaseTimeout  Duration      `json:"phase_timeout"`
		ContextBudget int           `json:"context_budget"`
		Timeout       Duration      `json:"timeout"`
	}
	if err := json.Unmarshal(r.Config, &h); err != nil {
		return Options{}, fmt.Errorf("run %s has unreadable options: %w", r.ID, err)
	}
	return Options{
		Model: h.Model.Name, BaseURL: h.Model.BaseURL, ModelAttempts: h.Model.MaxAttempts,
		Record: h.Model.Record, Replay: h.Model.Replay, MaxTurns: h.MaxTurns, Tools: h.Tools,
		Harness: true, Parallel: h.Parallel, PhaseTimeout: h.PhaseTimeout, ContextBudget: h.ContextBudget, Timeout: h.Timeout,
	}, nil
}
