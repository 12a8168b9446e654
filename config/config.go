// Package config resolves settings from flags, the environment and the
// optional $AGENT_HOME/config.toml, in that order of precedence.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
)

// Defaults used when nothing else sets a value.
const (
	DefaultBaseURL = "https://api.openai.com/v1"
	DefaultModel   = "gpt-4o-mini"

	DefaultSchedulerPollIntervalSeconds = 5
	DefaultSchedulerMaxConcurrentRuns   = 2
	DefaultSchedulerRecoveryPolicy      = "skip"
)

// File is the content of config.toml. Every key is optional.
type File struct {
	Model         string `toml:"model"`
	BaseURL       string `toml:"base_url"`
	MaxTurns      int    `toml:"max_turns"`
	ModelAttempts int    `toml:"model_attempts"`
	// ContextWindow is the model's context window in tokens (docs/PROTOCOL.md#configuration-files);
	// 0: a known default for the model, if any.
	ContextWindow int `toml:"context_window"`
	// Prices are per model, in USD per million tokens, for --max-cost and
	// cost_usd.
	Prices map[string]Price `toml:"prices"`
	// Vision says whether the model sees images (docs/PROTOCOL.md#images);
	// unset: whether it is known to.
	Vision *bool `toml:"vision"`

	// The gateway's scheduler (docs/PROTOCOL.md#configuration-files), under the key names the
	// design gives them.
	SchedulerEnabled             bool   `toml:"SchedulerEnabled"`
	SchedulerPollIntervalSeconds int    `toml:"SchedulerPollIntervalSeconds"`
	SchedulerMaxConcurrentRuns   int    `toml:"SchedulerMaxConcurrentRuns"`
	SchedulerRecoveryPolicy      string `toml:"SchedulerRecoveryPolicy"`

	// RetentionDays makes `agent gateway` prune the runs that finished
	// more than that many days ago, at start and then daily (README.md#retention,
	// agent prune); 0, the default, is off.
	RetentionDays int `toml:"RetentionDays"`

	// SandboxEnvPass names variables the model's commands get although
	// they look like secrets (README.md#the-sandbox), e.g. ["GITHUB_TOKEN"].
	SandboxEnvPass []string `toml:"sandbox_env_pass"`
	// SandboxWritable are more directories the model's commands may
	// write in a sandboxed mode, e.g. ["~/.cache/go-build"].
	SandboxWritable []string `toml:"sandbox_writable"`

	// MCP tool servers (docs/PROTOCOL.md#configuration-files), by name.
	MCPServers map[string]MCPServer `toml:"mcp_servers"`

	// Approvals are the approval rules every run has, and their deadline
	// (docs/PROTOCOL.md#waits); MaxWait bounds every wait ("24h").
	Approvals Approvals `toml:"approvals"`
	MaxWait   string    `toml:"max_wait"`

	// Notify are the [[notify]] blocks: who is told when a run waits or
	// ends (docs/PROTOCOL.md#notifications). PublicURL is the gateway's
	// address as a phone reaches it: a notification about a wait then
	// carries a one-decision link (docs/PROTOCOL.md#one-decision-links).
	Notify    []Notify `toml:"notify"`
	PublicURL string   `toml:"public_url"`

	// StructuredOutputs says whether the model endpoint takes a run's
	// output schema as response_format json_schema alongside tools (true)
	// or not (false); unset, agent decides by the endpoint
	// (docs/PROTOCOL.md#structured-output-and-providers).
	StructuredOutputs *bool `toml:"structured_outputs"`
	// Hooks are [hooks]: commands run at points of every run, by event,
	// in the shape of Claude Code's settings.json (docs/PROTOCOL.md#hooks).
	Hooks map[string][]HookMatcher `toml:"hooks"`
}

// HookMatcher is one entry of an event's hooks, as Claude Code's
// settings.json has it: the tools (or, for some events, the sources) it
// matches, and the commands it runs.
type HookMatcher struct {
	Matcher string `toml:"matcher" json:"matcher"`
	Hooks   []Hook `toml:"hooks" json:"hooks"`
}

// Hook is one command of a HookMatcher; Timeout is in seconds (0: 60).
type Hook struct {
	Type    string  `toml:"type" json:"type"`
	Command string  `toml:"command" json:"command"`
	Timeout float64 `toml:"timeout" json:"timeout"`
}

// Approvals is [approvals]: rules as --ask takes them, how long an
// approval or a question waits ("24h") and what its deadline does
// ("deny", "allow", "continue" or "fail").
type Approvals struct {
	Ask       []string `toml:"ask"`
	Timeout   string   `toml:"timeout"`
	OnTimeout string   `toml:"on_timeout"`
}

// Price is a model's price in USD per million tokens.
type Price struct {
	PromptPerMTok     float64 `toml:"prompt_per_mtok" json:"prompt_per_mtok"`
	CompletionPerMTok float64 `toml:"completion_per_mtok" json:"completion_per_mtok"`
}

// MCPServer is one MCP tool server: a command speaking MCP on stdio, or a
// Streamable HTTP URL. Values in Env and Headers may name environment
// variables ($VAR, ${VAR}, ${VAR:-default}); they are expanded when the
// server starts, so secrets stay out of the file.
type MCPServer struct {
	Command string            `toml:"command" json:"command,omitempty"`
	Args    []string          `toml:"args" json:"args,omitempty"`
	Env     map[string]string `toml:"env" json:"env,omitempty"`
	Cwd     string            `toml:"cwd" json:"cwd,omitempty"`

	URL            string            `toml:"url" json:"url,omitempty"`
	Headers        map[string]string `toml:"headers" json:"headers,omitempty"`
	BearerTokenEnv string            `toml:"bearer_token_env" json:"bearer_token_env,omitempty"`

	// Required (default true): the run fails at start without it.
	Required        *bool    `toml:"required" json:"required,omitempty"`
	StartupTimeoutS float64  `toml:"startup_timeout_s" json:"startup_timeout_s,omitempty"`
	ToolTimeoutS    float64  `toml:"tool_timeout_s" json:"tool_timeout_s,omitempty"`
	EnabledTools    []string `toml:"enabled_tools" json:"enabled_tools,omitempty"`
	DisabledTools   []string `toml:"disabled_tools" json:"disabled_tools,omitempty"`

	// Effects are the server's side-effecting tools, by tool name.
	Effects map[string]MCPEffect `toml:"effects" json:"effects,omitempty"`

	// Sandbox (default true): a stdio server runs in the run's sandbox,
	// with writes in the workspace and no AGENT_HOME; false runs it as
	// the user, unconfined. Network (default true) is its network there.
	Sandbox *bool `toml:"sandbox" json:"sandbox,omitempty"`
	Network *bool `toml:"network" json:"network,omitempty"`
}

// MCPEffect makes an MCP tool a side effect with a receipt (docs/PROTOCOL.md#side-effecting-tools).
type MCPEffect struct {
	Receipt string   `toml:"receipt" json:"receipt"`
	KeyArgs []string `toml:"key_args" json:"key_args"`
}

// Settings are the resolved values before command-line flags apply.
type Settings struct {
	Home string
	// Database is where the store is: AGENT_DATABASE_URL (a PostgreSQL
	// URL, set by --database too), else the SQLite file under Home.
	Database      string
	Model         string
	BaseURL       string
	BaseURLFrom   string // where BaseURL was set: OPENAI_BASE_URL, base_url in config.toml's path, or "" (the default)
	APIKey        string
	MaxTurns      int
	ModelAttempts int
	ContextWindow int
	Prices        map[string]Price

	// SchedulerEnabled makes `agent gateway` fire scheduled jobs;
	// `agent gateway --scheduler` does too.
	SchedulerEnabled             bool
	SchedulerPollIntervalSeconds int    // default 5
	SchedulerMaxConcurrentRuns   int    // default 2
	SchedulerRecoveryPolicy      string // skip (default) or run_once_on_recovery

	RetentionDays int // the gateway prunes runs finished longer ago; 0: off
}

// Home returns the data directory: $AGENT_HOME, else $XDG_DATA_HOME/agent,
// else ~/.local/share/agent.
func Home() (string, error) {
	if h := os.Getenv("AGENT_HOME"); h != "" {
		return filepath.Abs(h)
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "agent"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the data directory: set AGENT_HOME: %w", err)
	}
	return filepath.Join(home, ".local", "share", "agent"), nil
}

// DatabaseEnv names the PostgreSQL database many machines share
// (README.md#a-small-cluster); unset, the store is the SQLite file under AGENT_HOME.
const DatabaseEnv = "AGENT_DATABASE_URL"

// DBPath is where the store lives under home.
func DBPath(home string) string { return filepath.Join(home, "agent.db") }

// Error is a problem with the configuration the user can fix.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// HomeError is a data directory (AGENT_HOME) this machine will not let
// agent use: its config file cannot be read for a reason other than its
// content (docs/PROTOCOL.md#exit-codes, exit 5).
type HomeError struct {
	Path string
	Err  error
	Fix  string // what to do; default: make AGENT_HOME a directory you own
}

func (e *HomeError) Error() string {
	if e.Fix != "" {
		return fmt.Sprintf("cannot use %s: %v; %s", e.Path, e.Err, e.Fix)
	}
	return fmt.Sprintf("cannot use AGENT_HOME: %s: %v; make it a directory you own, or set AGENT_HOME to one", e.Path, e.Err)
}

func (e *HomeError) Unwrap() error { return e.Err }

// Load reads config.toml under home if it exists and applies the
// environment on top of it.
func Load() (Settings, error) {
	home, err := Home()
	if err != nil {
		return Settings{}, err
	}
	f, path, err := ReadFile(home)
	if err != nil {
		return Settings{}, err
	}
	s := Settings{
		Home:          home,
		Database:      Pick(os.Getenv(DatabaseEnv), DBPath(home)),
		Model:         Pick(os.Getenv("AGENT_MODEL"), f.Model, DefaultModel),
		BaseURL:       Pick(os.Getenv("OPENAI_BASE_URL"), f.BaseURL, DefaultBaseURL),
		APIKey:        os.Getenv("OPENAI_API_KEY"),
		MaxTurns:      f.MaxTurns,
		ModelAttempts: f.ModelAttempts,
		ContextWindow: f.ContextWindow,
		Prices:        f.Prices,

		SchedulerEnabled:             f.SchedulerEnabled,
		SchedulerPollIntervalSeconds: f.SchedulerPollIntervalSeconds,
		SchedulerMaxConcurrentRuns:   f.SchedulerMaxConcurrentRuns,
		SchedulerRecoveryPolicy:      f.SchedulerRecoveryPolicy,

		RetentionDays: f.RetentionDays,
	}
	switch {
	case os.Getenv("OPENAI_BASE_URL") != "":
		s.BaseURLFrom = "OPENAI_BASE_URL"
	case f.BaseURL != "":
		s.BaseURLFrom = "base_url in " + path
	}
	if u := os.Getenv(DatabaseEnv); u != "" && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return Settings{}, &Error{Msg: DatabaseEnv + " must be a PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE; unset it to use the SQLite file under AGENT_HOME"}
	}
	if s.ContextWindow < 0 {
		return Settings{}, &Error{Msg: fmt.Sprintf("config %s: context_window must be positive, got %d", path, s.ContextWindow)}
	}
	for model, p := range s.Prices {
		if p.PromptPerMTok < 0 || p.CompletionPerMTok < 0 {
			return Settings{}, &Error{Msg: fmt.Sprintf("config %s: prices.%q: a price cannot be negative", path, model)}
		}
	}
	if err := s.schedulerDefaults(path); err != nil {
		return Settings{}, err
	}
	if s.RetentionDays < 0 {
		return Settings{}, &Error{Msg: fmt.Sprintf("config %s: RetentionDays must be 0 (off) or a number of days, got %d", path, s.RetentionDays)}
	}
	return s, nil
}

// ReadFile reads config.toml under home; a missing file is an empty one.
// It returns the file's path, for messages.
func ReadFile(home string) (File, string, error) {
	var f File
	path := filepath.Join(home, "config.toml")
	md, err := toml.DecodeFile(path, &f)
	var unreadable *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.As(err, &unreadable):
		return f, path, &HomeError{Path: path, Err: unreadable.Err}
	case err != nil:
		return f, path, &Error{Msg: fmt.Sprintf("config %s: %v", path, err)}
	default:
		if fi, err := os.Stat(path); err == nil {
			if err := checkOwnership(path, fi); err != nil {
				return File{}, path, err
			}
		}
		if undecoded := md.Undecoded(); len(undecoded) > 0 {
			keys := make([]string, len(undecoded))
			for i, k := range undecoded {
				keys[i] = k.String()
			}
			return f, path, &Error{Msg: fmt.Sprintf("config %s: unknown key %s", path, strings.Join(keys, ", "))}
		}
		if err := f.checkNotify(); err != nil {
			return f, path, &Error{Msg: fmt.Sprintf("config %s: %v", path, err)}
		}
	}
	return f, path, nil
}

// schedulerDefaults fills in the scheduler settings the file left out
// (0 or "") and rejects the ones that cannot work, naming the key.
func (s *Settings) schedulerDefaults(path string) error {
	bad := func(format string, args ...any) error {
		return &Error{Msg: fmt.Sprintf("config %s: ", path) + fmt.Sprintf(format, args...)}
	}
	switch {
	case s.SchedulerPollIntervalSeconds < 0:
		return bad("SchedulerPollIntervalSeconds must be positive, got %d", s.SchedulerPollIntervalSeconds)
	case s.SchedulerPollIntervalSeconds == 0:
		s.SchedulerPollIntervalSeconds = DefaultSchedulerPollIntervalSeconds
	}
	switch {
	case s.SchedulerMaxConcurrentRuns < 0:
		return bad("SchedulerMaxConcurrentRuns must be positive, got %d", s.SchedulerMaxConcurrentRuns)
	case s.SchedulerMaxConcurrentRuns == 0:
		s.SchedulerMaxConcurrentRuns = DefaultSchedulerMaxConcurrentRuns
	}
	switch s.SchedulerRecoveryPolicy {
	case "":
		s.SchedulerRecoveryPolicy = DefaultSchedulerRecoveryPolicy
	case "skip", "run_once_on_recovery":
	default:
		return bad("SchedulerRecoveryPolicy %q: want \"skip\" or \"run_once_on_recovery\"", s.SchedulerRecoveryPolicy)
	}
	return nil
}

// Pick returns the first non-empty value: flag, then environment, then
// file, then default, in the order the caller passes them.
func Pick(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// PickInt is Pick for numbers, where zero means unset.
func PickInt(vals ...int) int {
	for _, v := range vals {
		if v != 0 {
			return v
		}
	}
	return 0
}
