package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"agent/config"
	"agent/mcp"
	"agent/runner"
	"agent/store"
	"agent/tools"
)

// What a front-end on this machine needs besides its flags: a supervisor
// as the settings say, a new run's options before its own, and a stopped
// run made ready to drive again here.

// ConfigFor is the Config of a supervisor over db, as the settings and
// the environment say. AGENT_RUNNER_EXEC runs children through another
// program, e.g. a sandbox wrapper that execs agent (it must speak the
// runner protocol); AGENT_LEASE_TTL, AGENT_HEARTBEAT_TIMEOUT and
// AGENT_KILL_GRACE exist for tests.
func ConfigFor(settings config.Settings, db *store.DB, version string) Config {
	return Config{
		DB: db, Home: settings.Home, APIKey: settings.APIKey, Version: version, BaseURL: settings.BaseURL, BaseURLFrom: settings.BaseURLFrom,
		Exe: os.Getenv("AGENT_RUNNER_EXEC"), LeaseTTL: durationEnv("AGENT_LEASE_TTL"),
		HeartbeatTimeout: durationEnv("AGENT_HEARTBEAT_TIMEOUT"), KillGrace: durationEnv("AGENT_KILL_GRACE"),
	}
}

// durationEnv reads a duration knob; 0, the default, if unset or not a
// positive duration.
func durationEnv(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return max(d, 0)
}

// DefaultOptions are a new run's options before a front-end lays its own
// over them: the config file's and the environment's.
func DefaultOptions(settings config.Settings) Options {
	return Options{
		Model: settings.Model, BaseURL: settings.BaseURL, ModelAttempts: settings.ModelAttempts, MaxTurns: settings.MaxTurns,
	}
}

// Reopen makes a run that Load found ready for this supervisor to drive
// again with o, its stored options as the front-end changed them: its
// workspace must still be there, o must hold, and no live process may
// hold the run (a *store.LeaseHeldError). A workspace that is gone is a
// *NotResumableError.
func (s *Supervisor) Reopen(ctx context.Context, r *store.Run, o Options) (Options, error) {
	if r.SessionID != "" {
		// Its events are the session's, in the session's sequence: a
		// gateway's session has it kept by the gateways, which a run
		// resumed here would not; agent chat's (Local) by whoever drives.
		sess, err := s.db.GetSession(ctx, r.SessionID)
		if err != nil {
			return o, err
		}
		if !sess.Local {
			return o, &NotResumableError{RunID: r.ID, Reason: fmt.Sprintf(
				"it ran in gateway session %s; continue it there: agent resume %s --gateway [URL] (or from the web view)", r.SessionID, r.ID)}
		}
	}
	if why := tools.MissingDir(r.Workspace); why != "" {
		return o, &NotResumableError{RunID: r.ID, Reason: "its workspace " + r.Workspace + ": " + why}
	}
	o, _, err := s.Prepare(o, r.Workspace)
	var bad *OptionError
	if errors.As(err, &bad) && bad.Field == "workspace" {
		return o, &NotResumableError{RunID: r.ID, Reason: bad.Message(func(string) string { return "its workspace" })}
	}
	if err != nil {
		return o, err
	}
	return o, s.Acquire(ctx, r.ID)
}

// ListServers starts each MCP server a run in dir (default the current
// directory) with o would have (config.toml's and o.MCPConfig's) as that
// run would start it, in its sandbox (o.Sandbox), lists its tools and
// stops it.
func ListServers(ctx context.Context, home, dir string, o Options, version string) ([]mcp.Listing, error) {
	var err error
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	f, servers, err := mcp.Configured(home, o.MCPConfig)
	if err != nil {
		return nil, err
	}
	confine, err := runner.ServerSandbox(home, dir, o.Sandbox, f)
	if err != nil {
		return nil, optionErr("sandbox", "{sandbox}: %v", err)
	}
	return mcp.List(ctx, servers, mcp.Options{Dir: dir, Version: "agent/" + version, Confine: confine}), nil
}
