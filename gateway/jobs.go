package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"agent/event"
	"agent/gateway/api"
	"agent/scheduler"
	"agent/store"
	"agent/supervisor"
	"agent/tools"
)

// Scheduled jobs (docs/PROTOCOL.md#scheduled-jobs): the job.* methods, the job events, and
// the scheduler's Dispatcher, which turns a tick into a normal run.

// errJobCancelled is why the scheduler stops a run before its timeout:
// the job was deleted, or the scheduler is stopping. To the run it is a
// cancellation like a client's.
var errJobCancelled = supervisor.Cancel("cancelled by the scheduler")

// defaultJobRuns is how many job runs job.get_runs returns by default.
const defaultJobRuns = 50

// runNowWait is how long job.run_now waits for its run to be started.
const runNowWait = 5 * time.Second

// initJobs creates the scheduler when the config asks for one. It fires
// nothing until startJobs.
func (s *Server) initJobs() error {
	sc := s.cfg.Scheduler
	if sc == nil {
		return nil
	}
	s.jobEvents = newHub(s.cfg.SubscriberBuffer, 0)
	s.jobDispatch = &jobDispatcher{s: s, attempts: map[string]jobAttempt{}, started: map[string]string{}, change: make(chan struct{})}
	eng, err := scheduler.New(scheduler.Config{
		Store:             s.db,
		Dispatcher:        s.jobDispatch,
		PollInterval:      sc.PollInterval,
		MaxConcurrentRuns: sc.MaxConcurrentRuns,
		RecoveryPolicy:    sc.RecoveryPolicy,
		CheckTools:        s.checkTools,
		Events:            s.publishJobEvent,
		Logger:            s.log,
	})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	s.jobs = eng
	return nil
}

// startJobs starts firing ticks if scheduling is enabled. Start calls it
// after reclaim, so the scheduler can take back the job runs that
// reclaim resumed (jobDispatcher.Reattach), and it applies the missed-run
// policy to the ticks that fell due while no gateway was running.
func (s *Server) startJobs(ctx context.Context) error {
	if s.jobs == nil || !s.cfg.Scheduler.Enabled {
		return nil
	}
	// ctx bounds the start-up only; the scheduler runs until Stop.
	if err := s.jobs.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// publishJobEvent sends a job event to every connected client. Job events
// go to no session journal: a job is not part of a session, the runs it
// starts already put their own events in theirs, and job_runs is the
// durable record (job.get_runs). It never blocks, as the scheduler
// requires.
func (s *Server) publishJobEvent(e event.Event) {
	s.jobEvents.publish(newItem(e))
	s.notifyJob(e)
}

// watchJobs subscribes the connection to the job events before the
// client hears it is connected, so that it misses none published once it
// has: they wait in the subscription's buffer until forwardJobs.
func (c *conn) watchJobs() {
	jobs := c.s.jobEvents
	if jobs == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.jobSub, _ = jobs.subscribe()
}

// forwardJobs sends the job events to the client, once it has its connect
// answer: from then on the hub's fan-out writes them, and a goroutine
// runs only while a client does not take them at once (job events are
// rare: no goroutine waits for them per client). One that falls more
// than SubscriberBuffer events behind is told and disconnected, as for a
// session's stream.
func (c *conn) forwardJobs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	sub := c.jobSub
	if sub == nil || c.closing {
		return
	}
	// The job stream counts in streams until it ends; the Add comes before
	// any Wait: Waits follow detach, which takes c.mu.
	c.streams.Add(1)
	start := func() { go c.sendJobs(sub) }
	sendNow := func(items []*item, b *frameBatch) ([]*item, bool) { return c.sendNow(nil, items, b) }
	if sub.onDemand(start, sendNow, c.streams.Done) {
		start()
	}
}

// sendJobs sends what is queued for sub, then returns; it ends the job
// stream if the client is gone or the subscription ended.
func (c *conn) sendJobs(sub *subscriber) {
	parked := false // nothing left: the fan-out goes on
	defer func() {
		if !parked {
			c.streams.Done()
		}
	}()
	if c.flush() != nil {
		return
	}
	var batch []*item
	for {
		items, open, stop := sub.takeOrStop(batch)
		if stop {
			parked = true
			return
		}
		batch = items
		for _, it := range items {
			if c.writeRaw(it.frame) != nil {
				return
			}
		}
		if !open {
			if sub.overflowed {
				c.s.log.Warn("slow consumer of job events disconnected", "conn", c.id)
				c.fail("", errorf(api.CodeSlowConsumer, "this connection fell more than %d job events behind; reconnect, then job.list and job.get_runs show what it missed", c.s.cfg.SubscriberBuffer))
			}
			return
		}
	}
}

// jobMethod serves the job.* methods.
func (s *Server) jobMethod(ctx context.Context, req api.Request) (any, error) {
	switch req.Method {
	case api.MethodJobList:
		jobs, err := s.jobs.ListJobs(ctx)
		if err != nil {
			return nil, err
		}
		return api.JobList{Jobs: orEmpty(jobs)}, nil
	case api.MethodJobCreate:
		var p api.JobCreateParams
		if err := decode(req.Params, &p); err != nil {
			return nil, err
		}
		return s.createJob(ctx, p)
	case api.MethodJobUpdate:
		var p api.JobUpdateParams
		if err := decode(req.Params, &p); err != nil {
			return nil, err
		}
		return s.updateJob(ctx, p)
	case api.MethodJobGetRuns:
		var p api.JobRunsParams
		if err := decode(req.Params, &p); err != nil {
			return nil, err
		}
		return s.jobRuns(ctx, p)
	}
	var p api.JobParams
	if err := decode(req.Params, &p); err != nil {
		return nil, err
	}
	if p.JobID == "" {
		return nil, errorf(api.CodeBadRequest, "job_id is required")
	}
	switch req.Method {
	case api.MethodJobPause:
		return s.jobs.PauseJob(ctx, p.JobID)
	case api.MethodJobResume:
		return s.jobs.ResumeJob(ctx, p.JobID)
	case api.MethodJobRunNow:
		run, err := s.jobs.RunNow(ctx, p.JobID)
		if err == nil && run.Status != event.StatusSkipped {
			// Tell the caller which run to follow, once there is one.
			run.RunID = s.jobDispatch.awaitRun(ctx, run.ID, runNowWait)
		}
		return run, err
	case api.MethodJobDelete:
		j, err := s.jobs.GetJob(ctx, p.JobID)
		if err != nil {
			return nil, err
		}
		if err := s.jobs.DeleteJob(ctx, j.ID); err != nil {
			return nil, err
		}
		return api.JobDeleted{JobID: j.ID, Name: j.Name, Deleted: true}, nil
	}
	return nil, errorf(api.CodeUnknownMethod, "method %q is not supported by this gateway", req.Method)
}

// checkJobFields bounds a job's name and prompt as run.start bounds a
// title and an input.
func checkJobFields(name, prompt *string) error {
	if name != nil && utf8.RuneCountInString(*name) > maxTitle {
		return errorf(api.CodeInvalidJob, "name has %d characters; at most %d are accepted", utf8.RuneCountInString(*name), maxTitle)
	}
	if prompt != nil && len(*prompt) > maxInput {
		return errorf(api.CodeInvalidJob, "prompt has %d bytes; at most %d (1 MiB) are accepted", len(*prompt), maxInput)
	}
	return nil
}

func (s *Server) createJob(ctx context.Context, p api.JobCreateParams) (scheduler.Job, error) {
	if err := checkJobFields(&p.Name, &p.Prompt); err != nil {
		return scheduler.Job{}, err
	}
	policy, err := s.jobPolicy(scheduler.DefaultPolicy(), p.Policy)
	if err != nil {
		return scheduler.Job{}, err
	}
	sessionID, err := s.jobSession(ctx, p.SessionID)
	if err != nil {
		return scheduler.Job{}, err
	}
	return s.jobs.CreateJob(ctx, scheduler.JobSpec{
		Name: p.Name, CronExpr: p.CronExpr, Timezone: p.Timezone, Prompt: p.Prompt,
		SessionID: sessionID, Policy: policy, Paused: p.Paused,
	})
}

func (s *Server) updateJob(ctx context.Context, p api.JobUpdateParams) (scheduler.Job, error) {
	if p.JobID == "" {
		return scheduler.Job{}, errorf(api.CodeBadRequest, "job_id is required")
	}
	if err := checkJobFields(p.Name, p.Prompt); err != nil {
		return scheduler.Job{}, err
	}
	cur, err := s.jobs.GetJob(ctx, p.JobID)
	if err != nil {
		return scheduler.Job{}, err
	}
	// The policy fields given change and the rest keep their values, so
	// a client need not read the job first. (Two concurrent updates of
	// one job: the last wins.)
	policy, err := s.jobPolicy(cur.Policy, p.Policy)
	if err != nil {
		return scheduler.Job{}, err
	}
	if p.SessionID != nil {
		id, err := s.jobSession(ctx, *p.SessionID)
		if err != nil {
			return scheduler.Job{}, err
		}
		p.SessionID = &id
	}
	return s.jobs.UpdateJob(ctx, cur.ID, scheduler.JobUpdate{
		Name: p.Name, CronExpr: p.CronExpr, Timezone: p.Timezone, Prompt: p.Prompt,
		SessionID: p.SessionID, Policy: policy,
	})
}

func (s *Server) jobRuns(ctx context.Context, p api.JobRunsParams) (*api.JobRunList, error) {
	switch {
	case p.JobID == "":
		return nil, errorf(api.CodeBadRequest, "job_id is required")
	case p.Limit < 0:
		return nil, errorf(api.CodeBadRequest, "limit must be 0 (the default, %d) or more", defaultJobRuns)
	case p.Limit == 0:
		p.Limit = defaultJobRuns
	}
	j, err := s.jobs.GetJob(ctx, p.JobID)
	if err != nil {
		return nil, err
	}
	runs, err := s.jobs.JobRuns(ctx, j.ID, p.Limit)
	if err != nil {
		return nil, err
	}
	return &api.JobRunList{Job: j, Runs: orEmpty(runs)}, nil
}

// policyFields are the keys of a policy object, to refuse a misspelt one
// rather than ignore it.
var policyFields = []string{"overlap", "missed", "retry", "timeout", "tools", "sandbox", "network", "max_tokens", "max_cost", "ask"}

// jobPolicy applies the fields of a policy object to base; nil if there
// is none. Sandbox "off" needs a gateway started with --allow-unsandboxed.
func (s *Server) jobPolicy(base scheduler.Policy, raw json.RawMessage) (*scheduler.Policy, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, errorf(api.CodeInvalidJob, "invalid policy: %v", err)
	}
	for k := range fields {
		if !slices.Contains(policyFields, k) {
			return nil, errorf(api.CodeInvalidJob, "invalid policy: unknown field %q (want overlap, missed, retry, timeout, tools, sandbox, network, max_tokens, max_cost or ask)", k)
		}
	}
	if err := json.Unmarshal(raw, &base); err != nil {
		return nil, errorf(api.CodeInvalidJob, "invalid policy: %v", err)
	}
	if base.Sandbox == "off" && !s.cfg.AllowUnsandboxed {
		return nil, errorf(api.CodeInvalidJob, unsandboxedRefusal, "policy.sandbox")
	}
	return &base, nil
}

// jobSession resolves a job's target session (a unique prefix will do),
// so a wrong one is refused when the job is saved, not at every tick.
// "" means a new session per run.
func (s *Server) jobSession(ctx context.Context, id string) (string, error) {
	if id == "" {
		return "", nil
	}
	row, err := s.db.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
		return "", errorf(api.CodeInvalidJob, "target %v; create a session with session.create, or leave it out for a new session per run", err)
	}
	if err != nil {
		return "", err
	}
	return row.ID, nil
}

// checkTools vets a job's tool allowlist as resolve vets run.start's
// options.allow_tools: every name must be a tool, and the list must leave
// one. The run is checked again when it starts.
func (s *Server) checkTools(names []string) error {
	ws, err := tools.NewWorkspace(s.cfg.DefaultWorkspace)
	if err != nil {
		return err
	}
	_, err = s.sup.OfferedTools(ws, supervisor.Options{AllowTools: names})
	var bad *supervisor.OptionError
	if errors.As(err, &bad) {
		return errors.New(bad.Message(func(string) string { return "the allowlist" }))
	}
	return err
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// jobDispatcher is the scheduler's Dispatcher. A tick becomes a normal
// run, started as run.start starts one, so it has the same events,
// session memory and retention: in the job's target session, or in a
// new session titled after the job.
type jobDispatcher struct {
	s *Server

	mu       sync.Mutex
	attempts map[string]jobAttempt // by run id, until the run has ended
	started  map[string]string     // run id by job run id, until the run has ended
	change   chan struct{}         // closed (and replaced) when started changes
}

// awaitRun returns the id of the run started for a job run, waiting up
// to within for it; "" if none was started by then.
func (d *jobDispatcher) awaitRun(ctx context.Context, jobRunID string, within time.Duration) string {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		runID, ok := d.started[jobRunID]
		change := d.change
		d.mu.Unlock()
		if ok {
			return runID
		}
		select {
		case <-change:
		case <-deadline.C:
			return ""
		case <-ctx.Done():
			return ""
		}
	}
}

// jobAttempt is when a job's run was started and its timeout, so Cancel
// can tell the scheduler's timeout from a stop.
type jobAttempt struct {
	began    time.Time
	timeout  time.Duration
	jobRunID string
}

// Start starts the tick's run. A target session another client holds
// locked refuses it, as it refuses any run.start without the lock.
func (d *jobDispatcher) Start(ctx context.Context, job scheduler.Job, tick scheduler.Tick) (string, <-chan scheduler.Result, error) {
	s := d.s
	sessionID := job.TargetSessionID
	if sessionID == "" {
		title := fmt.Sprintf("job %s · %s", job.Name, tick.ScheduledFor.Format("2006-01-02 15:04:05 MST"))
		row, err := s.sessions.create(ctx, title, job.ID)
		if err != nil {
			return "", nil, err
		}
		sessionID = row.ID
	}
	began := time.Now()
	res, err := s.startRun(ctx, api.RunStartParams{
		SessionID: sessionID,
		Input:     tick.Prompt,
		// The allowlist is the run's options.allow_tools: resolve checks
		// it and the child is offered only those tools. The timeout is the
		// run's own as well, so it holds even for a reclaimed run the
		// scheduler no longer watches.
		Options: api.RunOptions{AllowTools: tick.Tools, Timeout: supervisor.Duration(tick.Timeout), Sandbox: tick.Sandbox, Network: tick.Network,
			MaxTokens: tick.MaxTokens, MaxCost: tick.MaxCost, Ask: tick.Ask, OutputSchema: tick.OutputSchema},
		// Ties the run to its job_runs row (run.get shows the key).
		IdempotencyKey: "job-run:" + tick.JobRunID,
	}, 0)
	if err != nil {
		return "", nil, err
	}
	d.mu.Lock()
	d.attempts[res.RunID] = jobAttempt{began: began, timeout: tick.Timeout, jobRunID: tick.JobRunID}
	d.started[tick.JobRunID] = res.RunID
	close(d.change)
	d.change = make(chan struct{})
	d.mu.Unlock()
	return res.RunID, d.watch(res.RunID), nil
}

// Cancel stops a job's run, as run.cancel does. At the job's timeout the
// run ends failed with "timed out after …", as the run's own timeout
// would end it; otherwise (and for a reattached run, whose start this
// gateway did not see) cancelled.
func (d *jobDispatcher) Cancel(runID string) {
	cause := errJobCancelled
	d.mu.Lock()
	a, ok := d.attempts[runID]
	d.mu.Unlock()
	if ok && time.Since(a.began) >= a.timeout {
		cause = supervisor.Timeout(a.timeout)
	}
	waiting, found := d.s.queue.stop(runID, cause)
	if waiting != nil {
		d.s.endUnstarted(context.Background(), waiting, cause)
	}
	if row, err := d.s.db.GetRun(context.Background(), runID); !found && err == nil && row.Status == event.StatusWaiting && row.SessionID != "" {
		// Parked on a wait: nothing drives it to stop.
		if err := d.s.cancelWaiting(context.Background(), row, cause); err != nil {
			d.s.log.Error("stop a job's waiting run", "run_id", runID, "err", err)
		}
	}
}

// Reattach hands back to a starting scheduler a job's run that the
// previous gateway left running: one this gateway's reclaim resumed, or
// one that has ended since (reclaim failed it), so the attempt is
// recorded as it really ends instead of as interrupted. A run still
// marked running that this gateway does not hold (another process has
// it) is not handed back.
func (d *jobDispatcher) Reattach(runID string) (<-chan scheduler.Result, bool) {
	if _, _, live := d.s.queue.get(runID); !live {
		row, err := d.s.db.GetRun(context.Background(), runID)
		if err != nil || row.Status == event.StatusRunning {
			return nil, false
		}
	}
	return d.watch(runID), true
}

// watch returns the done channel of a job's run: it delivers the run's
// Result and closes once the run has ended. The queue closes r.done when
// the run's goroutine returns, which is after its child has exited, or
// once a run that never started has been recorded; either way the store
// then has the run's outcome.
func (d *jobDispatcher) watch(runID string) <-chan scheduler.Result {
	done := make(chan scheduler.Result, 1)
	r, _, live := d.s.queue.get(runID)
	go func() {
		defer close(done)
		defer d.forget(runID)
		for {
			if live {
				<-r.done
			} else if ended := d.s.ended(context.Background(), runID); ended != nil {
				<-ended // a worker drives it
			}
			row, err := d.s.db.GetRun(context.Background(), runID)
			if err != nil {
				d.s.log.Error("read how a job's run ended", "run_id", runID, "err", err)
				return // closed without a Result: the attempt failed
			}
			if !paused(row) {
				done <- runResult(row)
				return
			}
			// Paused, not ended: the attempt is the continued run's. The
			// scheduler frees its slot and stops its timeout meanwhile; a
			// gateway that stops leaves it waiting, for the next one.
			done <- scheduler.Result{Status: event.StatusWaiting}
			if !d.awaitResume(runID) {
				return
			}
			done <- scheduler.Result{Status: event.StatusRunning}
			r, _, live = d.s.queue.get(runID)
		}
	}()
	return done
}

// paused says a run stopped without ending, and goes on by itself: it
// waits (for a person, a time, a rate limit), which the gateway or a
// worker wakes it from, or it is a harness the provider rate-limited,
// which the gateway resumes at its resume_after (ratelimit.go).
func paused(r *store.Run) bool {
	return r.Status == event.StatusWaiting || r.Status == event.StatusInterrupted && r.Reason == event.ReasonRateLimited
}

// awaitResume waits until a paused run is queued again, or has moved on
// already; false if the gateway stops first.
func (d *jobDispatcher) awaitResume(runID string) bool {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if d.s.stopping.Load() {
			return false
		}
		if _, _, live := d.s.queue.get(runID); live {
			return true
		}
		row, err := d.s.db.GetRun(context.Background(), runID)
		if err != nil || !paused(row) {
			return true
		}
	}
	return false
}

func (d *jobDispatcher) forget(runID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.started, d.attempts[runID].jobRunID)
	delete(d.attempts, runID)
}

// runResult is how a job's run ended, from its stored row.
func runResult(r *store.Run) scheduler.Result {
	switch r.Status {
	case event.StatusCompleted:
		return scheduler.Result{Status: event.StatusCompleted}
	case event.StatusCancelled:
		return scheduler.Result{Status: event.StatusCancelled, Err: r.Detail}
	case event.StatusFailed:
		return scheduler.Result{Status: event.StatusFailed, Err: r.Detail}
	}
	msg := "the run stopped as " + r.Status
	if r.Detail != "" {
		msg += ": " + r.Detail
	}
	return scheduler.Result{Status: event.StatusFailed, Err: msg}
}
