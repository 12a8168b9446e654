package gateway

import (
	"errors"
	"path/filepath"

	"agent/config"
	"agent/supervisor"
	"agent/tools"
)

// RunOptions are run.start's options: a run's settings, the same as the
// CLI's flags. Zero values take the gateway's defaults.
type RunOptions = supervisor.Options

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
func (s *Server) resolve(p RunStartParams) (RunOptions, *tools.Workspace, error) {
	o := p.Options
	if o.Record != "" {
		return o, nil, errorf(CodeInvalidOptions, "options.record is not supported: the gateway makes the model calls; record with agent run --record")
	}
	d := s.cfg.Model
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
		return o, nil, errorf(CodeBadRequest, "workspace %q must be an absolute path", dir)
	}
	if o.Replay != "" && !filepath.IsAbs(o.Replay) {
		o.Replay = filepath.Join(dir, o.Replay)
	}
	o, ws, err := s.sup.Prepare(o, dir)
	var bad *supervisor.OptionError
	if errors.As(err, &bad) {
		code := CodeInvalidOptions
		if bad.Field == "workspace" {
			code = CodeBadRequest
		}
		return o, nil, errorf(code, "%s", bad.Message(optionName))
	}
	return o, ws, err
}
