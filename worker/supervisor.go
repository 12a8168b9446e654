package worker

import (
	"log/slog"
	"path/filepath"

	"agent/config"
	"agent/store"
	"agent/supervisor"
)

// SupervisorConfig is the Config of a worker's supervisor, as the settings
// say (supervisor.ConfigFor), with what driving runs for gateways on a
// shared store asks of it.
func SupervisorConfig(settings config.Settings, db *store.DB, version string, logger *slog.Logger) supervisor.Config {
	cfg := supervisor.ConfigFor(settings, db, version)
	cfg.LogDir, cfg.Logger = filepath.Join(settings.Home, "logs"), logger
	cfg.Unshown = true          // gateways read the events from the store
	cfg.QueueAttempts = true    // any worker runs a harness's phase attempts
	cfg.BackgroundExport = true // a run's slot is not held for a trace collector
	return cfg
}
