package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"agent/config"
	"agent/store"
	"agent/supervisor"
	"agent/worker"
)

// workerCommand is `agent worker` (README.md#a-small-cluster).
func workerCommand() *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "claim queued runs and harness phase attempts from the shared database and drive them",
		Description: "A worker claims the runs gateways queue in a PostgreSQL database (AGENT_DATABASE_URL or --database)\n" +
			"and drives each in an 'agent runner' child, --concurrency at a time. Start any number, on any number of\n" +
			"machines: a run's lease says which worker drives it, and the runs of a worker that dies are taken over\n" +
			"by another once their leases expire (AGENT_LEASE_TTL, 30s by default), resumed with no completed tool\n" +
			"call run again and no side effect repeated. A run's workspace must be at the same path on every worker.\n" +
			"A harness run's worker plans it and verifies its phases, but queues each phase attempt for any worker:\n" +
			"parallel phases spread over the machines. An attempt whose worker dies or stops is started again\n" +
			"elsewhere and does not count against the phase's max_attempts; its side effects are not repeated.\n" +
			"A worker drives up to --concurrency harness runs besides its --concurrency children.\n" +
			"SIGTERM or Ctrl-C interrupts the runs it drives and puts them back in the queue for another worker.\n\n" +
			"Examples:\n" +
			"  agent worker --database postgres://agent@db.internal/agent --concurrency 4\n" +
			"  agent worker -n 8 --database postgres://agent@db.internal/agent --poll 2s\n" +
			"  agent --database postgres://agent@db.internal/agent worker -n 2",
		Flags: []cli.Flag{
			databaseFlag(),
			&cli.IntFlag{Name: "concurrency", Aliases: []string{"n"}, Value: 2, Usage: "children at once: single runs and phase attempts"},
			&cli.DurationFlag{Name: "run-timeout", Usage: "bound each run whose options set no timeout (0: none)"},
			&cli.DurationFlag{Name: "poll", Value: time.Second, Usage: "how often to look for queued runs when no notification came"},
		},
		Action: workerAction,
	}
}

func workerAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("agent worker takes no arguments; see 'agent worker --help'")
	}
	if n := c.Int("concurrency"); n < 1 || n > 256 {
		return usageErrorf("--concurrency %d: want 1 to 256", n)
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	if !store.IsURL(settings.Database) {
		return usageErrorf("agent worker needs the shared database: set %s (or --database) to postgres://USER:PASSWORD@HOST:PORT/DATABASE", config.DatabaseEnv)
	}
	db, err := store.Open(settings.Database)
	if err != nil {
		return err
	}
	defer db.Close()
	logger := slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
	sup, err := supervisor.New(worker.SupervisorConfig(settings, db, version, logger))
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		DB: db, Sup: sup, Concurrency: c.Int("concurrency"), Poll: c.Duration("poll"),
		RunTimeout: c.Duration("run-timeout"), Logger: logger,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Fprintf(c.App.ErrWriter, "agent worker %s: driving up to %d runs and phase attempts at once from %s\n", sup.Owner(), c.Int("concurrency"), store.Redact(settings.Database))
	err = w.Run(ctx)
	sup.WaitExports() // the last runs' traces, each bounded by its timeout
	return err
}
