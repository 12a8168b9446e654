// Package mcp connects a run to MCP tool servers (README.md#mcp-tool-servers): it
// starts the servers a run is configured with, offers their tools to the
// model as mcp__SERVER__TOOL, calls them with a deadline, restarts a server
// that died once, and stops every server's whole process group when the
// run ends. Tools marked as effects go through the run's outbox like
// send_email, so they happen at most once.
package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"agent/config"
)

// Defaults of a server's deadlines.
const (
	DefaultStartupTimeout = 10 * time.Second
	DefaultToolTimeout    = 60 * time.Second
)

// Server is one configured server, checked and with its defaults.
type Server struct {
	Name   string
	Source string // where it was configured: config.toml or a --mcp-config file
	config.MCPServer
	Required bool
	// Sandboxed: a stdio server runs in the run's sandbox (Options.Confine),
	// with the network when Network.
	Sandboxed, Network bool
	StartupTimeout     time.Duration
	ToolTimeout        time.Duration
}

// HTTP reports whether the server is reached over Streamable HTTP.
func (s Server) HTTP() bool { return s.URL != "" }

// ConfigError is a server configuration that cannot work; it names the
// file and the server.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

var serverName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*$`)
})

// Configured returns home's config.toml (empty when home is "") and the
// servers of it and of the --mcp-config files, as Load does: a run
// process reads its configuration once.
func Configured(home string, files []string) (config.File, []Server, error) {
	var f config.File
	path := "config.toml"
	if home != "" {
		var err error
		if f, path, err = config.ReadFile(home); err != nil {
			return f, nil, err
		}
	}
	servers, err := Load(f.MCPServers, path, files)
	return f, servers, err
}

// Load returns the servers of config.toml (fromConfig, read from
// configPath) and of each --mcp-config file, in that order; a file's
// server replaces config.toml's of the same name. The result is sorted by
// name.
func Load(fromConfig map[string]config.MCPServer, configPath string, files []string) ([]Server, error) {
	byName := map[string]Server{}
	for name, c := range fromConfig {
		s, err := check(name, c, configPath)
		if err != nil {
			return nil, err
		}
		byName[name] = s
	}
	for _, f := range files {
		servers, err := ReadFile(f)
		if err != nil {
			return nil, err
		}
		for name, c := range servers {
			s, err := check(name, c, f)
			if err != nil {
				return nil, err
			}
			byName[name] = s
		}
	}
	out := make([]Server, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[name])
	}
	return out, nil
}

// mcpJSON is Claude Code's .mcp.json.
type mcpJSON struct {
	MCPServers map[string]struct {
		Type    string            `json:"type"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
		Cwd     string            `json:"cwd"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`

		// agent's own keys, so one file can say everything config.toml can.
		Required        *bool                       `json:"required"`
		StartupTimeoutS float64                     `json:"startup_timeout_s"`
		ToolTimeoutS    float64                     `json:"tool_timeout_s"`
		EnabledTools    []string                    `json:"enabled_tools"`
		DisabledTools   []string                    `json:"disabled_tools"`
		BearerTokenEnv  string                      `json:"bearer_token_env"`
		Effects         map[string]config.MCPEffect `json:"effects"`
		Sandbox         *bool                       `json:"sandbox"`
		Network         *bool                       `json:"network"`
	} `json:"mcpServers"`
}

// ReadFile reads a .mcp.json file: {"mcpServers": {NAME: {"command",
// "args", "env"} | {"type": "http", "url", "headers"}}}.
func ReadFile(path string) (map[string]config.MCPServer, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &ConfigError{Msg: fmt.Sprintf("--mcp-config %s: no such file", path)}
	}
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("--mcp-config %s: %v", path, err)}
	}
	var f mcpJSON
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&f); err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("--mcp-config %s: not a .mcp.json file: %v", path, err)}
	}
	if f.MCPServers == nil {
		return nil, &ConfigError{Msg: fmt.Sprintf(`--mcp-config %s: no "mcpServers" object`, path)}
	}
	out := map[string]config.MCPServer{}
	for name, s := range f.MCPServers {
		switch s.Type {
		case "", "stdio": // with a url and no command, an HTTP server
		case "http", "streamable-http", "streamableHttp":
			if s.URL == "" {
				return nil, &ConfigError{Msg: fmt.Sprintf("--mcp-config %s: server %q: type %q needs a \"url\"", path, name, s.Type)}
			}
		default:
			return nil, &ConfigError{Msg: fmt.Sprintf("--mcp-config %s: server %q: type %q is not supported; use \"stdio\" or \"http\"", path, name, s.Type)}
		}
		out[name] = config.MCPServer{
			Command: s.Command, Args: s.Args, Env: s.Env, Cwd: s.Cwd, URL: s.URL, Headers: s.Headers,
			BearerTokenEnv: s.BearerTokenEnv, Required: s.Required, StartupTimeoutS: s.StartupTimeoutS,
			ToolTimeoutS: s.ToolTimeoutS, EnabledTools: s.EnabledTools, DisabledTools: s.DisabledTools, Effects: s.Effects,
			Sandbox: s.Sandbox, Network: s.Network,
		}
	}
	return out, nil
}

// check validates one server and fills in its defaults.
func check(name string, c config.MCPServer, source string) (Server, error) {
	bad := func(format string, args ...any) (Server, error) {
		return Server{}, &ConfigError{Msg: fmt.Sprintf("%s: MCP server %q: ", source, name) + fmt.Sprintf(format, args...)}
	}
	switch {
	case !serverName().MatchString(name):
		return bad("a server name is letters, digits, - and single _ (it becomes part of the tool names mcp__%s__TOOL)", name)
	case c.Command == "" && c.URL == "":
		return bad("set command (a stdio server) or url (a Streamable HTTP server)")
	case c.Command != "" && c.URL != "":
		return bad("set command or url, not both")
	case c.URL != "" && !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://"):
		return bad("url %q must start with http:// or https://", c.URL)
	case c.StartupTimeoutS < 0:
		return bad("startup_timeout_s must be positive")
	case c.ToolTimeoutS < 0:
		return bad("tool_timeout_s must be positive")
	}
	// key_args = [] is one effect per run and phase; whether one left out
	// is an error depends on the tool's arguments, known once it is listed
	// (conn.checkKeyArgs).
	for tool, e := range c.Effects {
		if e.Receipt == "" {
			return bad("effects.%s needs receipt, the type of receipt it records (e.g. \"issue_created\")", tool)
		}
	}
	if c.URL != "" && (c.Sandbox != nil || c.Network != nil) {
		return bad("sandbox and network apply to a stdio server (command), not to a url")
	}
	s := Server{Name: name, Source: source, MCPServer: c, Required: c.Required == nil || *c.Required,
		Sandboxed: c.Sandbox == nil || *c.Sandbox, Network: c.Network == nil || *c.Network,
		StartupTimeout: seconds(c.StartupTimeoutS, DefaultStartupTimeout), ToolTimeout: seconds(c.ToolTimeoutS, DefaultToolTimeout)}
	return s, nil
}

func seconds(s float64, def time.Duration) time.Duration {
	if s == 0 {
		return def
	}
	return time.Duration(s * float64(time.Second))
}

// expand replaces $VAR, ${VAR} and ${VAR:-default} in v from getenv. A
// variable that is unset and has no default is an error naming it, so a
// server never starts with a silently empty token.
func expand(v string, getenv func(string) string) (string, error) {
	var missing []string
	out := os.Expand(v, func(ref string) string {
		name, def, hasDef := strings.Cut(ref, ":-")
		if val := getenv(name); val != "" {
			return val
		}
		if !hasDef {
			missing = append(missing, name)
		}
		return def
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("$%s is not set", missing[0])
	}
	return out, nil
}

// SecretNames are the environment variables the servers' configuration
// takes credentials from: the model's commands must not see them.
func SecretNames(servers []Server) []string {
	var out []string
	ref := func(v string) {
		os.Expand(v, func(name string) string {
			name, _, _ = strings.Cut(name, ":-")
			out = append(out, name)
			return ""
		})
	}
	for _, s := range servers {
		for _, v := range s.Env {
			ref(v)
		}
		for _, v := range s.Headers {
			ref(v)
		}
		if s.BearerTokenEnv != "" {
			out = append(out, s.BearerTokenEnv)
		}
	}
	return out
}
