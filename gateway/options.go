package gateway

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"agent/adapter"
	"agent/config"
	"agent/orchestrator"
	"agent/store"
	"agent/tools"
)

// settings are a run's resolved options: run.start's, or the gateway's
// defaults where it set none.
type settings struct {
	Model         string
	BaseURL       string
	ModelAttempts int
	MaxTurns      int
	AllowTools    []string
	DenyTools     []string
	// Tools are the names children are given when allow or deny lists
	// were set; nil leaves children their default set.
	Tools []string
	// Offered are the tools the run will have, for run.started.
	Offered       []string
	Until         string
	MaxIterations int
	Timeout       time.Duration
	Harness       bool
	Parallel      int
	Replay        string // absolute cassette path
}

// resolve checks run.start's options the way the fast path checks its
// flags, and fills in the gateway's defaults. Problems are invalid_options
// errors naming the option.
func (s *Server) resolve(p RunStartParams) (settings, *tools.Workspace, error) {
	o := p.Options
	st := settings{
		Model:         config.Pick(o.Model, s.cfg.Model.Name),
		BaseURL:       config.Pick(o.BaseURL, s.cfg.Model.BaseURL),
		ModelAttempts: config.PickInt(o.ModelAttempts, s.cfg.Model.Attempts),
		MaxTurns:      config.PickInt(o.MaxTurns, s.cfg.Model.MaxTurns),
		AllowTools:    o.AllowTools,
		DenyTools:     o.DenyTools,
		Until:         strings.TrimSpace(o.Until),
		MaxIterations: o.MaxIterations,
		Timeout:       s.cfg.RunTimeout,
		Harness:       o.Harness,
		Parallel:      o.Parallel,
	}
	bad := func(format string, args ...any) (settings, *tools.Workspace, error) {
		return st, nil, errorf(CodeInvalidOptions, format, args...)
	}
	switch {
	case o.MaxTurns < 0:
		return bad("options.max_turns must be positive")
	case o.ModelAttempts < 0:
		return bad("options.model_attempts must be positive")
	case o.MaxIterations < 0:
		return bad("options.max_iterations must be positive")
	case o.MaxIterations > 0 && st.Until == "":
		return bad("options.max_iterations needs options.until, the line that marks the task complete")
	case strings.Contains(st.Until, "\n"):
		return bad("options.until must be a single line")
	case o.Parallel < 0:
		return bad("options.parallel must be positive")
	case o.Parallel > 0 && !o.Harness:
		return bad("options.parallel applies to harness runs only (options.harness)")
	case o.Harness && st.Until != "":
		return bad("options.until applies to single runs; harness phases set their own in the plan")
	}
	if o.Timeout != "" {
		d, err := time.ParseDuration(o.Timeout)
		if err != nil || d <= 0 {
			return bad("options.timeout %q is not a positive duration like 10m", o.Timeout)
		}
		st.Timeout = d
	}

	dir := p.Workspace
	if dir == "" {
		dir = s.cfg.DefaultWorkspace
	}
	if !filepath.IsAbs(dir) {
		return st, nil, errorf(CodeBadRequest, "workspace %q must be an absolute path", dir)
	}
	ws, err := tools.NewWorkspace(dir)
	if err != nil {
		return st, nil, errorf(CodeBadRequest, "workspace: %v", err)
	}

	// The same check as the fast path: unknown names are an error, and
	// effect tools that are not configured are left out unless asked for.
	extra := tools.EffectTools(tools.EffectScope{}, nil, s.getenv)
	if o.Harness {
		extra = append(extra, tools.RecordTools()...)
	}
	deny := tools.WithoutUnconfigured(st.AllowTools, st.DenyTools, s.getenv)
	set, err := tools.NewSet(ws, tools.Options{Allow: st.AllowTools, Deny: deny}, extra...)
	if err != nil {
		return bad("%v", err)
	}
	st.Offered = set.Names()
	if len(st.AllowTools)+len(st.DenyTools) > 0 {
		if len(st.Offered) == 0 {
			return bad("options.allow_tools and options.deny_tools leave no tool")
		}
		st.Tools = st.Offered
	}

	if o.Replay != "" {
		path := o.Replay
		if !filepath.IsAbs(path) {
			path = filepath.Join(ws.Root(), path)
		}
		if _, err := os.Stat(path); err != nil {
			return bad("options.replay: %v", err)
		}
		st.Replay = path
		return st, ws, nil
	}
	u, err := url.Parse(st.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("invalid base URL %q: want http(s)://host[:port]/v1", st.BaseURL)
	}
	if s.getenv("OPENAI_API_KEY") == "" && !isLoopback(u.Hostname()) {
		return bad("the gateway has no OPENAI_API_KEY for %s; start it with the key set, point options.base_url at a local server, or use options.replay", u.Host)
	}
	return st, ws, nil
}

// getenv reads the children's environment, which is what tools and the
// model client will see.
func (s *Server) getenv(name string) string {
	prefix := name + "="
	val := ""
	for _, kv := range s.cfg.Env {
		if strings.HasPrefix(kv, prefix) {
			val = kv[len(prefix):] // the last one wins, as in exec
		}
	}
	return val
}

// Stored settings. Their JSON keys are those of the fast path's run and
// harness configs, so `agent resume` can continue a gateway run too.
type storedRun struct {
	store.RunConfig
	// Gateway only.
	Tools   []string `json:"tools,omitempty"`
	Offered []string `json:"offered,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
	Replay  string   `json:"replay,omitempty"`
}

type storedHarness struct {
	Model        adapter.Model `json:"model"`
	MaxTurns     int           `json:"max_turns,omitempty"`
	Tools        []string      `json:"tools,omitempty"`
	Parallel     int           `json:"parallel"`
	PhaseTimeout string        `json:"phase_timeout"`
	// Gateway only.
	Offered []string `json:"offered,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
}

// encode is what store.Run.Config keeps.
func (st settings) encode() json.RawMessage {
	var v any
	if st.Harness {
		v = storedHarness{
			Model:    adapter.Model{Name: st.Model, BaseURL: st.BaseURL, MaxAttempts: st.ModelAttempts, Replay: st.Replay},
			MaxTurns: st.MaxTurns, Tools: st.Tools, Parallel: max(st.Parallel, 1),
			PhaseTimeout: st.phaseTimeout().String(), Offered: st.Offered, Timeout: st.Timeout.String(),
		}
	} else {
		v = storedRun{
			RunConfig: store.RunConfig{
				Model: st.Model, BaseURL: st.BaseURL, MaxTurns: st.MaxTurns, ModelAttempts: st.ModelAttempts,
				AllowTools: st.AllowTools, DenyTools: st.DenyTools, Until: st.Until, MaxIterations: st.MaxIterations,
			},
			Tools: st.Tools, Offered: st.Offered, Timeout: st.Timeout.String(), Replay: st.Replay,
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		panic("gateway: marshal settings: " + err.Error()) // plain structs: cannot fail
	}
	return raw
}

// decodeSettings reads a run's stored settings back, for a reclaim.
func decodeSettings(r *store.Run, fallback time.Duration) (settings, error) {
	parseTimeout := func(s string) time.Duration {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			return d
		}
		return fallback
	}
	if r.Kind == store.KindHarness {
		var h storedHarness
		if err := json.Unmarshal(r.Config, &h); err != nil {
			return settings{}, fmt.Errorf("run %s has unreadable settings: %w", r.ID, err)
		}
		return settings{
			Model: h.Model.Name, BaseURL: h.Model.BaseURL, ModelAttempts: h.Model.MaxAttempts, Replay: h.Model.Replay,
			MaxTurns: h.MaxTurns, Tools: h.Tools, Offered: h.Offered, Parallel: h.Parallel,
			Timeout: parseTimeout(h.Timeout), Harness: true,
		}, nil
	}
	var c storedRun
	if err := json.Unmarshal(r.Config, &c); err != nil {
		return settings{}, fmt.Errorf("run %s has unreadable settings: %w", r.ID, err)
	}
	return settings{
		Model: c.Model, BaseURL: c.BaseURL, MaxTurns: c.MaxTurns, ModelAttempts: c.ModelAttempts,
		AllowTools: c.AllowTools, DenyTools: c.DenyTools, Tools: c.Tools, Offered: c.Offered,
		Until: c.Until, MaxIterations: c.MaxIterations, Timeout: parseTimeout(c.Timeout), Replay: c.Replay,
	}, nil
}

// phaseTimeout bounds each harness phase attempt by the run's own limit.
func (st settings) phaseTimeout() time.Duration {
	return min(orchestrator.DefaultPhaseTimeout, st.Timeout)
}

func (st settings) model() adapter.Model {
	return adapter.Model{Name: st.Model, BaseURL: st.BaseURL, MaxAttempts: st.ModelAttempts, Replay: st.Replay}
}
