// Package scheduler runs cron jobs inside the gateway (docs/PROTOCOL.md#scheduled-jobs): it
// parses schedules in each job's time zone, fires every tick at most once
// even across restarts, enforces the job's overlap, missed-run, retry and
// timeout policy, and hands each tick to a Dispatcher that starts a normal
// run.
//
// A tick is (job id, scheduled time). The engine claims it by inserting
// its job_runs row, which a unique key makes possible only once, in the
// same transaction that moves the job's next_run_at on; a process that
// dies after that never runs the tick again, and one that dies before it
// leaves the tick due for the next.
//
// Wiring, in the gateway:
//
//	eng, err := scheduler.New(scheduler.Config{
//		Store:             db, // *store.DB
//		Dispatcher:        runs, // starts a run for a tick; see Dispatcher
//		PollInterval:      time.Duration(cfg.SchedulerPollIntervalSeconds) * time.Second,
//		MaxConcurrentRuns: cfg.SchedulerMaxConcurrentRuns,
//		RecoveryPolicy:    cfg.SchedulerRecoveryPolicy,
//		Events:            hub.PublishJobEvent, // job.* events; must not block
//		Logger:            logger,
//	})
//	if cfg.SchedulerEnabled {
//		err = eng.Start(ctx) // ... eng.Stop() on shutdown
//	}
//
// job.create, job.update, job.pause, job.resume, job.delete, job.list and
// job.get_runs map to CreateJob, UpdateJob, PauseJob, ResumeJob,
// DeleteJob, ListJobs/GetJob and JobRuns, which work whether or not the
// engine is started; job.run_now maps to RunNow, which returns
// ErrNotRunning while scheduling is off. Errors matching ErrInvalidJob
// are the caller's (invalid_job); store.ErrNotFound, store.ErrAmbiguous
// and store.ErrNameTaken come from the store.
package scheduler
