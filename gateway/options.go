package gateway

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"agent/config"
	"agent/gateway/api"
	"agent/supervisor"
	"agent/tools"
)

// optionName is how the gateway names an option in an error: the field of
// run.start it came from.
func optionName(field string) string {
	if field == "workspace" {
		return "workspace"
	}
	return "options." + field
}

// resolve checks run.start's options as every front-end does
// (supervisor.Prepare) and fills in the gateway's defaults. Problems are
// invalid_options errors naming the option.
func (s *Server) resolve(p api.RunStartParams) (api.RunOptions, *tools.Workspace, error) {
	o := p.Options
	if o.Record != "" {
		return o, nil, errorf(api.CodeInvalidOptions, "options.record is not supported: the gateway makes the model calls; record with agent run --record")
	}
	d := s.cfg.Model
	if o.BaseURL != "" && !s.cfg.AllowAnyBaseURL && !sameURL(o.BaseURL, d.BaseURL) {
		return o, nil, errorf(api.CodeInvalidOptions, "options.base_url %q is not this gateway's model endpoint, to which it sends its API key; leave options.base_url out, or start the gateway with --allow-any-base-url", o.BaseURL)
	}
	if o.Sandbox == "off" && !s.cfg.AllowUnsandboxed {
		return o, nil, errorf(api.CodeInvalidOptions, unsandboxedRefusal, "options.sandbox")
	}
	// An MCP server runs outside the sandbox: a client may not name one
	// (a file it could have written with write_file); the gateway's own
	// config.toml says which run.
	if len(o.MCPConfig) > 0 && !s.cfg.AllowUnsandboxed {
		return o, nil, errorf(api.CodeInvalidOptions, "options.mcp_config is refused: the MCP servers it names would run unsandboxed on this host; "+
			"configure them in the gateway's config.toml [mcp_servers], or start the gateway with --allow-unsandboxed")
	}
	// So does a hook: the gateway's config.toml [hooks] are every run's.
	if o.Settings != "" && !s.cfg.AllowUnsandboxed {
		return o, nil, errorf(api.CodeInvalidOptions, "options.settings is refused: the hooks it names would run unsandboxed on this host; "+
			"configure them in the gateway's config.toml [hooks], or start the gateway with --allow-unsandboxed")
	}
	if o.Settings != "" && !filepath.IsAbs(o.Settings) {
		return o, nil, errorf(api.CodeInvalidOptions, "options.settings %q must be an absolute path", o.Settings)
	}
	// A client gives an image's bytes: the store has nothing of its own.
	for i, img := range o.Images {
		if img.Data == nil {
			return o, nil, errorf(api.CodeInvalidOptions, "options.images[%d].data is required: the image's bytes, base64-encoded", i)
		}
	}
	o.Model = config.Pick(o.Model, d.Name)
	o.BaseURL = config.Pick(o.BaseURL, d.BaseURL)
	o.ModelAttempts = config.PickInt(o.ModelAttempts, d.Attempts)
	o.MaxTurns = config.PickInt(o.MaxTurns, d.MaxTurns)
	if o.Timeout == 0 {
		o.Timeout = supervisor.Duration(s.cfg.RunTimeout)
	}
	dir := p.Workspace
	if dir == "" {
		dir = s.cfg.DefaultWorkspace
	}
	if !filepath.IsAbs(dir) {
		return o, nil, errorf(api.CodeBadRequest, "workspace %q must be an absolute path", dir)
	}
	// Checked before Prepare looks at the directory, so a refused one
	// tells nothing about what exists outside the roots.
	if e := s.checkWorkspace(dir); e != nil {
		return o, nil, e
	}
	if o.Replay != "" && !filepath.IsAbs(o.Replay) {
		o.Replay = filepath.Join(dir, o.Replay)
	}
	if e := s.checkReplay(o.Replay); e != nil {
		return o, nil, e
	}
	o, ws, err := s.sup.Prepare(o, dir)
	var bad *supervisor.OptionError
	if errors.As(err, &bad) {
		code := api.CodeInvalidOptions
		if bad.Field == "workspace" {
			code = api.CodeBadRequest
		}
		return o, nil, errorf(code, "%s", bad.Message(optionName))
	}
	if err != nil {
		return o, nil, err
	}
	// Again on the directory Prepare resolved, which the run uses: a
	// symlink may have changed in between.
	if e := s.checkWorkspace(ws.Root()); e != nil {
		return o, nil, e
	}
	return o, ws, nil
}

// checkWorkspace refuses a workspace outside every workspace root. The
// path's symlinks are resolved, and it is compared by components, so
// /srv/ws admits /srv/ws/a but neither /srv/ws-evil nor a link in /srv/ws
// to /etc.
func (s *Server) checkWorkspace(dir string) *api.Error {
	p := resolvePath(dir)
	for _, root := range s.roots {
		if within(root, p) {
			return nil
		}
	}
	return errorf(api.CodeBadRequest, "workspace %s is outside this gateway's workspace roots (%s); use a directory in one of them, or start the gateway with --workspace-root DIR",
		dir, strings.Join(s.roots, ", "))
}

// checkReplay refuses a cassette outside the workspace roots, or one that
// is not a regular file (a device such as /dev/zero would be read without
// end). One that does not exist is left to Prepare to report.
func (s *Server) checkReplay(path string) *api.Error {
	if path == "" {
		return nil
	}
	real := resolvePath(path)
	inside := false
	for _, root := range s.roots {
		inside = inside || within(root, real)
	}
	if !inside {
		return errorf(api.CodeInvalidOptions, "options.replay %s is outside this gateway's workspace roots (%s); put the cassette in the workspace, or start the gateway with --workspace-root DIR",
			path, strings.Join(s.roots, ", "))
	}
	if st, err := os.Stat(real); err == nil && !st.Mode().IsRegular() {
		return errorf(api.CodeInvalidOptions, "options.replay %s is not a regular file", path)
	}
	return nil
}

// resolvePath resolves the symlinks of an absolute path's longest part
// that exists; the rest, which does not exist, is taken as it is.
func resolvePath(path string) string {
	p, rest := filepath.Clean(path), ""
	for {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether path is root or below it; both are clean and
// absolute.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// sameURL reports whether two model endpoints are the same: scheme and
// host compared without case, a trailing slash ignored.
func sameURL(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return false
	}
	norm := func(u *url.URL) string {
		return strings.ToLower(u.Scheme) + "://" + u.User.String() + "@" + strings.ToLower(u.Host) + strings.TrimSuffix(u.EscapedPath(), "/") + "?" + u.RawQuery
	}
	return ua.Host != "" && norm(ua) == norm(ub)
}

// unsandboxedRefusal is the gateway's answer to sandbox "off" (a %s names
// the field) when it was not started with --allow-unsandboxed: runs
// nobody watches must not run unconfined by a client's choice alone.
const unsandboxedRefusal = "%s \"off\" is refused: this gateway was not started with --allow-unsandboxed; leave it out for workspace-write, or use read-only"
