// Package supervisor is a durable run, for every front-end: the CLI, the
// harness, the gateway and its jobs, and workers. It validates a run's
// options once, creates the run, holds and renews its lease, journals its
// events, rebuilds its state on resume, drives it (in this process, in an
// `agent runner` child, or as a harness of phases), keeps the outbox of its
// side effects, rewinds its files, and says how it ended in one place
// (Ending). Front-ends keep only their flags, transport and presentation.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"agent/event"
	"agent/notify"
	"agent/store"
	"agent/telemetry"
)

// DefaultLeaseTTL is how long a lease outlives its last renewal.
const DefaultLeaseTTL = 30 * time.Second

// Config is what a supervisor needs. Zero values take the defaults noted.
type Config struct {
	DB *store.DB
	// Home is AGENT_HOME: file checkpoints keep their content there.
	Home string
	// Env is the environment of children and of side-effecting tools;
	// default os.Environ(). APIKey, if set, is added to it.
	Env    []string
	APIKey string
	// BaseURL is the model endpoint the settings give a new run, and
	// BaseURLFrom where they took it from (config.Settings): a message
	// about that value says where to fix it.
	BaseURL, BaseURLFrom string

	// Children: the binary run as `agent runner` (default this one), its
	// hang watchdog and SIGTERM-to-SIGKILL grace (zero: the adapter's).
	Exe              string
	HeartbeatTimeout time.Duration
	KillGrace        time.Duration
	// LogDir receives the stderr of single-run children as RUN_ID.log;
	// empty keeps it only for crash reasons. Phases log into their run's
	// directory.
	LogDir string

	LeaseTTL time.Duration // default DefaultLeaseTTL; renewed every LeaseTTL/3
	// Unshown says this process shows no run's events to anyone before
	// they are stored, and no process driving the same runs does: `agent
	// worker`, whose gateways read events from the store. Its journals then
	// keep a session's stream gapless across a takeover, and stream text
	// through the store (store.Journal.Unshown).
	Unshown bool
	// QueueAttempts puts a harness's phase attempts in the store's attempt
	// queue, for any worker to run (DriveAttempt), rather than in children
	// of this process: `agent worker`. Planning stays here.
	QueueAttempts bool
	Owner         string       // lease owner; default a new one for this process
	Version       string       // for the model client's User-Agent
	Logger        *slog.Logger // default: discard
	// BackgroundExport sends a run's trace (OTEL_EXPORTER_OTLP_ENDPOINT)
	// after Drive returns rather than before, so that a process driving
	// many runs (the gateway) never holds one for its collector;
	// WaitExports waits for those exports.
	BackgroundExport bool
	// RecordInSession writes one event of a session's run that no drive
	// of this process is writing (a notification's warning, notify.go):
	// a gateway's, through the session journal it keeps. Nil: only a
	// process whose journals take their seqs as they write (Unshown)
	// records such an event.
	RecordInSession func(ctx context.Context, r *store.Run, e event.Event) error
}

// Supervisor drives durable runs. It is safe for concurrent use: a
// gateway drives many runs through one.
type Supervisor struct {
	cfg    Config
	db     *store.DB
	apiKey string
	log    *slog.Logger
	traces *telemetry.Exporter // nil unless OTEL_EXPORTER_OTLP_ENDPOINT is set
	notify *notify.Notifier    // config.toml's [[notify]] channels
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Supervisor, error) {
	if cfg.DB == nil {
		return nil, errors.New("supervisor: a store is required")
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.APIKey != "" {
		cfg.Env = append(cfg.Env[:len(cfg.Env):len(cfg.Env)], "OPENAI_API_KEY="+cfg.APIKey)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Owner == "" {
		cfg.Owner = store.NewLeaseOwner()
	}
	logged := cfg.Logger != nil
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Supervisor{cfg: cfg, db: cfg.DB, log: cfg.Logger}
	s.apiKey = s.Getenv("OPENAI_API_KEY")
	s.traces = s.tracesFromEnv(logged)
	s.notify = s.notifier()
	return s, nil
}

// Owner is the lease owner of every run this supervisor drives.
func (s *Supervisor) Owner() string { return s.cfg.Owner }

// LeaseTTL is how long its leases last without renewal.
func (s *Supervisor) LeaseTTL() time.Duration { return s.cfg.LeaseTTL }

// Getenv reads the environment runs get, which is what tools and the
// model client see; the last setting of a name wins, as in exec.
func (s *Supervisor) Getenv(name string) string {
	prefix := name + "="
	val := ""
	for _, kv := range s.cfg.Env {
		if strings.HasPrefix(kv, prefix) {
			val = kv[len(prefix):]
		}
	}
	return val
}

// NewRun is a run to create.
type NewRun struct {
	Prompt    string
	Workspace string // absolute, as Prepare resolved it
	SessionID string // a gateway session, or ""
	// IdempotencyKey, if set, is unique within the session: a second
	// create with it fails with store.ErrDuplicateKey.
	IdempotencyKey string
	Options        Options // as Prepare resolved them
	// Queue leaves the run waiting for a worker (`agent worker`) instead
	// of leasing it to this supervisor.
	Queue bool
	// Alone creates it only if no live process drives another run of the
	// session (store.CreateRunAlone): agent chat's local sessions.
	Alone bool
}

// Create records a new run, running and leased to this supervisor, or
// queued for a worker.
func (s *Supervisor) Create(ctx context.Context, n NewRun) (*store.Run, error) {
	kind := store.KindRun
	if n.Options.Harness {
		kind = store.KindHarness
	}
	r := &store.Run{
		ID: uuid.NewString(), Kind: kind, SessionID: n.SessionID, Prompt: n.Prompt, Workspace: n.Workspace,
		Model: n.Options.Model, Config: n.Options.encode(), MaxIterations: n.Options.MaxIterations,
		CompletionPromise: n.Options.Until, IdempotencyKey: n.IdempotencyKey,
	}
	// The store keeps the images' bytes; the options name them.
	if err := s.db.PutImages(ctx, n.Options.Images); err != nil {
		return nil, err
	}
	owner := s.cfg.Owner
	if n.Queue {
		r.Queue, owner = event.StatusWaiting, ""
	}
	create := s.db.CreateRun
	if n.Alone {
		create = s.db.CreateRunAlone
	}
	if err := create(ctx, r, owner, s.cfg.LeaseTTL); err != nil {
		return nil, err
	}
	return r, nil
}

// NotResumableError is a run that exists but cannot be continued.
type NotResumableError struct {
	RunID  string
	Reason string
}

func (e *NotResumableError) Error() string {
	return fmt.Sprintf("run %s is not resumable: %s", e.RunID, e.Reason)
}

// Load finds a run to resume (id may be a unique prefix) and reads the
// options it was stored with. A run that ended for good is a
// *NotResumableError.
func (s *Supervisor) Load(ctx context.Context, id string) (*store.Run, Options, error) {
	r, err := s.db.GetRun(ctx, id)
	if err != nil {
		return nil, Options{}, err
	}
	if r.Status == event.StatusCompleted || r.Status == event.StatusCancelled {
		return nil, Options{}, &NotResumableError{RunID: r.ID, Reason: "it is already " + r.Status}
	}
	if r.ParentRunID != "" {
		return nil, Options{}, &NotResumableError{RunID: r.ID, Reason: fmt.Sprintf(
			"it is a subagent of run %s; 'agent resume %s' continues it", r.ParentRunID, r.ParentRunID)}
	}
	o, err := DecodeOptions(r)
	if err != nil {
		return nil, Options{}, &NotResumableError{RunID: r.ID, Reason: err.Error()}
	}
	return r, o, nil
}

// Acquire takes the run's lease for this supervisor. A live holder
// refuses it with a *store.LeaseHeldError.
func (s *Supervisor) Acquire(ctx context.Context, runID string) error {
	return s.db.AcquireLease(ctx, runID, s.cfg.Owner, s.cfg.LeaseTTL)
}

// Release gives the run's lease up.
func (s *Supervisor) Release(ctx context.Context, runID string) error {
	return s.db.ReleaseLease(ctx, runID, s.cfg.Owner)
}

// Renew extends the lease of a run this supervisor holds and has not
// started driving (a gateway's queued runs); Drive renews its own. A
// lease that expired without anyone taking it is simply taken again. It
// returns a *store.LeaseHeldError once another process holds it.
func (s *Supervisor) Renew(ctx context.Context, runID string) error {
	err := s.db.RenewLease(ctx, runID, s.cfg.Owner, s.cfg.LeaseTTL)
	if errors.Is(err, store.ErrLeaseLost) {
		err = s.Acquire(ctx, runID)
	}
	return err
}

// keepLease renews the run's lease until stopped; losing it to another
// process stops the run.
func (s *Supervisor) keepLease(ctx context.Context, stop context.CancelCauseFunc, runID string) (halt func()) {
	return s.keepRenewing(ctx, stop, func(ctx context.Context) error {
		err := s.Renew(ctx, runID)
		var held *store.LeaseHeldError
		if errors.As(err, &held) {
			s.log.Warn("lost a run lease", "run_id", runID, "holder", held.Owner)
			return errLeaseLost
		}
		if err != nil {
			s.log.Error("renew lease", "run_id", runID, "err", err)
		}
		return nil
	})
}

// keepRenewing calls renew every LeaseTTL/3 until ctx ends or renew
// returns why the hold is lost, and then stops with that cause. halt ends
// the renewals and waits for the last one.
func (s *Supervisor) keepRenewing(ctx context.Context, stop context.CancelCauseFunc, renew func(context.Context) error) (halt func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if lost := renew(context.WithoutCancel(ctx)); lost != nil {
				stop(lost)
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
