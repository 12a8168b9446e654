package gateway

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"agent/config"
	"agent/store"
	"agent/supervisor"
)

// The gateway as a process of this machine, `agent gateway`: its Config as
// the settings say, and its stop when the process is signalled.

// FromSettings is the Config the settings say, for a front-end to lay its
// flags over: the data directory and its logs, the model of runs that set
// none, the scheduler, retention, the children's program and knobs
// (supervisor.ConfigFor), and on a shared database, workers that drive the
// runs.
func FromSettings(settings config.Settings, db *store.DB, version string) Config {
	children := supervisor.ConfigFor(settings, db, version)
	return Config{
		DB: db, Version: version, Home: settings.Home, LogDir: filepath.Join(settings.Home, "logs"),
		Model: ModelDefaults{
			Name: settings.Model, BaseURL: settings.BaseURL, APIKey: settings.APIKey,
			Attempts: settings.ModelAttempts, MaxTurns: settings.MaxTurns,
		},
		Exe: children.Exe, HeartbeatTimeout: children.HeartbeatTimeout, KillGrace: children.KillGrace, LeaseTTL: children.LeaseTTL,
		RetentionDays: settings.RetentionDays,
		Workers:       store.IsURL(settings.Database),
		Scheduler: &SchedulerConfig{
			Enabled:           settings.SchedulerEnabled,
			PollInterval:      time.Duration(settings.SchedulerPollIntervalSeconds) * time.Second,
			MaxConcurrentRuns: settings.SchedulerMaxConcurrentRuns,
			RecoveryPolicy:    settings.SchedulerRecoveryPolicy,
		},
	}
}

// StopOnSignal waits for a signal from sigs, then stops the gateway as
// Stop does: running runs get DrainGrace to finish, then their children
// their kill grace. A second signal stops waiting and interrupts every run
// at once (context.Canceled).
func (s *Server) StopOnSignal(sigs <-chan os.Signal) error {
	<-sigs
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainGrace+time.Minute)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return s.Stop(ctx)
}
