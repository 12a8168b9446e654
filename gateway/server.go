package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"agent/event"
	"agent/gateway/api"
	"agent/scheduler"
	"agent/store"
	"agent/supervisor"
)

// Server is the gateway daemon: HTTP and WebSocket on one port, runs in
// `agent runner` children, sessions with replayable streams.
type Server struct {
	cfg Config
	db  *store.DB
	log *slog.Logger
	// sup drives the runs; its lease owner holds every run this gateway
	// has queued or running.
	sup *supervisor.Supervisor

	sessions *sessions
	queue    *queue
	wakes    *wakes       // waking waiting runs (waits.go)
	metrics  *metrics     // what /metrics counts itself (metrics.go)
	web      *webSessions // signed-in web pages (web.go)

	// jobs is the scheduler and jobEvents fans its events out to every
	// client; both nil without Config.Scheduler (jobs.go).
	jobs        *scheduler.Engine
	jobDispatch *jobDispatcher
	jobEvents   *hub

	ln   net.Listener // a connLimiter
	http *http.Server
	// roots are the workspace roots, symlinks resolved: DefaultWorkspace
	// and Config.WorkspaceRoots.
	roots []string

	// admit orders run.start against Stop: starts hold it shared, Stop
	// takes it to flip stopping.
	admit    sync.RWMutex
	started  atomic.Bool
	stopping atomic.Bool
	stopOnce sync.Once
	stopErr  error

	connMu      sync.Mutex
	conns       map[*conn]struct{}
	connsGone   int  // how many connections have ended
	connsClosed bool // after the drain: no new connections
	connsWG     sync.WaitGroup
	nextID      atomic.Uint64

	background sync.WaitGroup // serve loop and lease heartbeat
	quit       chan struct{}  // stops the heartbeat
}

// New checks cfg and fills in its defaults; Start does the rest.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var s *Server
	sup, err := supervisor.New(supervisor.Config{
		DB: cfg.DB, Home: cfg.Home, Env: cfg.Env, APIKey: cfg.Model.APIKey,
		Exe: cfg.Exe, HeartbeatTimeout: cfg.HeartbeatTimeout, KillGrace: cfg.KillGrace, LogDir: cfg.LogDir,
		LeaseTTL: cfg.LeaseTTL, Version: cfg.Version, Logger: cfg.Logger,
		BackgroundExport: true, // a run's slot is not held for a trace collector
		RecordInSession:  func(ctx context.Context, r *store.Run, e event.Event) error { return s.recordInSession(ctx, r, e) },
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	m := newMetrics()
	s = &Server{
		cfg: cfg, db: cfg.DB, log: cfg.Logger, sup: sup, metrics: m,
		sessions: newSessions(cfg.DB, cfg.SubscriberBuffer, m),
		web:      newWebSessions(cfg.DB),
		wakes:    newWakes(),
		conns:    map[*conn]struct{}{},
		quit:     make(chan struct{}),
	}
	for _, root := range append([]string{cfg.DefaultWorkspace}, cfg.WorkspaceRoots...) {
		real, err := filepath.EvalSymlinks(root)
		if err != nil {
			return nil, fmt.Errorf("gateway: workspace root %s: %w", root, err)
		}
		s.roots = append(s.roots, real)
	}
	s.queue = newQueue(cfg.MaxConcurrentRuns, s.execute)
	// No ReadTimeout: it would cut WebSocket and event streams too. The
	// other routes set their own (bounded, http.go).
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ConnContext:       connContext,
	}
	if err := s.initJobs(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start listens, reclaims the runs a dead gateway left behind, and
// serves in the background. ctx bounds the start-up only; the server
// runs until Stop.
func (s *Server) Start(ctx context.Context) error {
	if s.stopping.Load() || !s.started.CompareAndSwap(false, true) {
		return errors.New("gateway: already started or stopped")
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return &ListenError{Addr: s.cfg.Listen, Err: err}
	}
	s.ln = newConnLimiter(ln, s.cfg.MaxConnections, s.log)
	if s.cfg.Workers {
		// Workers take over the runs of a worker that died.
		s.background.Add(1)
		go func() {
			defer s.background.Done()
			s.follow()
		}()
	} else if err := s.reclaim(ctx); err != nil {
		ln.Close()
		return fmt.Errorf("gateway: reclaim runs: %w", err)
	}
	if err := s.startJobs(ctx); err != nil {
		ln.Close()
		return err
	}
	if !s.cfg.Workers {
		// Workers wake the runs they parked (store.QueueParkedRun).
		s.background.Add(1)
		go func() {
			defer s.background.Done()
			s.wakeLoop()
		}()
	}
	s.background.Add(4)
	go func() {
		defer s.background.Done()
		s.web.sweep(s.quit)
	}()
	go func() {
		defer s.background.Done()
		s.keepalive()
	}()
	go func() {
		defer s.background.Done()
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "err", err)
		}
	}()
	go func() {
		defer s.background.Done()
		s.heartbeat()
	}()
	s.startRetention()
	s.startNotifications()
	s.log.Debug("gateway listening", "addr", s.Addr(), "version", s.cfg.Version, "lease_owner", s.sup.Owner())
	return nil
}

// Addr is the address the gateway listens on, e.g. 127.0.0.1:7420.
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.cfg.Listen
	}
	return s.ln.Addr().String()
}

// Stop drains the gateway: run.start is refused (unavailable, retryable),
// queued runs are recorded interrupted, running runs get DrainGrace to
// finish and are then interrupted; interrupted runs keep the reason
// "gateway stopped; resumable" and the next Start resumes them. Then the
// connections close. Stop returns once every goroutine it started has
// ended, or when ctx ends first.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	s.admit.Lock()
	s.stopping.Store(true)
	s.admit.Unlock()
	if !s.started.Load() {
		return nil
	}
	s.log.Info("gateway stopping", "drain_grace", s.cfg.DrainGrace)
	// Scheduled runs belong to the scheduler: stopping it cancels them and
	// records their ticks cancelled, so none is left to resume as a run no
	// job tracks. Then the other runs drain.
	if s.jobs != nil {
		s.jobs.Stop()
	}
	for _, r := range s.queue.close() {
		if r.woken {
			// It still waits, as far as anyone can tell: the next start
			// wakes it again.
			_ = s.sup.Release(context.WithoutCancel(ctx), r.id)
			s.queue.forget(r)
			continue
		}
		s.endUnstarted(ctx, r, errDrained)
	}
	drainErr := s.queue.drain(ctx, s.cfg.DrainGrace, errDrained)
	close(s.quit)
	s.sup.WaitExports() // the drained runs' traces, each bounded by its timeout

	// Clients could watch the drain; now they are told to go.
	s.connMu.Lock()
	s.connsClosed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.connMu.Unlock()
	var closing sync.WaitGroup
	for _, c := range conns {
		closing.Add(1)
		go func() {
			defer closing.Done()
			c.shutdown(StatusGoingAway, "the gateway is stopping")
		}()
	}
	shutdownErr := s.http.Shutdown(ctx)
	done := make(chan struct{})
	go func() {
		closing.Wait()
		s.connsWG.Wait()
		s.background.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		for _, c := range conns {
			c.ws.CloseNow()
		}
		<-done
	}
	flushErr := s.sessions.flush(context.WithoutCancel(ctx))
	s.log.Info("gateway stopped")
	return errors.Join(drainErr, shutdownErr, flushErr)
}

// heartbeat renews the lease of every run waiting in the queue every
// LeaseTTL/3, so a dead gateway's runs can be reclaimed and a live one's
// cannot. The supervisor renews the leases of the runs it drives.
func (s *Server) heartbeat() {
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		for _, id := range s.queue.waitingIDs() {
			s.renew(id)
		}
	}
}

func (s *Server) renew(id string) {
	err := s.sup.Renew(context.Background(), id)
	var held *store.LeaseHeldError
	if errors.As(err, &held) {
		// Another process drives the run now.
		s.log.Warn("lost a run lease", "run_id", id, "holder", held.Owner)
		if waiting, _ := s.queue.stop(id, supervisor.Interrupt("lost the run lease")); waiting != nil {
			s.queue.forget(waiting)
		}
		return
	}
	if err != nil {
		s.log.Error("renew lease", "run_id", id, "err", err)
	}
}

// Methods this gateway implements, in connect's answer.
var methods = []string{
	api.MethodSessionCreate, api.MethodSessionResume, api.MethodSessionFork, api.MethodSessionList, api.MethodSessionGet,
	api.MethodSessionLock, api.MethodSessionRelease, api.MethodSessionDelete, api.MethodRunStart, api.MethodRunCancel, api.MethodRunResume, api.MethodRunGet,
	api.MethodCheckpointList, api.MethodCheckpointRewind, api.MethodWaitAnswer,
}

// Events the gateway emits: the run events of docs/PROTOCOL.md#run-events a gateway run
// produces, rewind.completed (checkpoint.rewind),
// plus effect.failed (a side effect that certainly did not happen), which
// `agent run --json` shows too.
var events = []string{
	event.RunStarted, event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted,
	event.PlanCreated, event.PhaseStarted, event.PhaseCompleted, event.PhaseFailed,
	event.IterationStarted, event.IterationCompleted, event.MessageDelta, event.MessageCompleted,
	event.ToolStarted, event.ToolCompleted, event.ToolProgress, event.ArtifactCreated, event.ReceiptRecorded,
	event.LearningRecorded, event.ApproachFailed, event.VerificationCompleted,
	event.CheckpointCreated, event.RewindCompleted, event.Retry, event.Warning, event.EffectFailed, event.EffectUnknown,
	event.RunWaiting, event.WaitResolved,
}

// jobMethods are advertised when the gateway has a scheduler, whether or
// not scheduling is enabled.
var jobMethods = []string{
	api.MethodJobCreate, api.MethodJobUpdate, api.MethodJobPause, api.MethodJobResume, api.MethodJobDelete,
	api.MethodJobList, api.MethodJobRunNow, api.MethodJobGetRuns,
}

func (s *Server) connectResult() api.ConnectResult {
	ms, evs := slices.Clone(methods), events
	var scheduling *bool
	if s.jobs != nil {
		ms = append(ms, jobMethods...)
		evs = append(slices.Clone(events), scheduler.EventTypes...)
		on := s.cfg.Scheduler.Enabled
		scheduling = &on
	}
	return api.ConnectResult{Server: "agent " + s.cfg.Version, Protocol: api.Protocol, Methods: ms, Events: evs, Scheduling: scheduling}
}
