package scheduler

import (
	"time"

	"agent/event"
)

// Job event types (docs/PROTOCOL.md#scheduled-jobs).
const (
	EventJobCreated        = "job.created"
	EventJobUpdated        = "job.updated"
	EventJobTriggered      = "job.triggered"       // a tick was claimed and will run
	EventJobStarted        = "job.started"         // an attempt was dispatched; run_id names the run
	EventJobCompleted      = "job.completed"       // the run completed
	EventJobFailed         = "job.failed"          // an attempt failed; will_retry says whether another follows
	EventJobSkippedOverlap = "job.skipped_overlap" // the overlap policy skipped a tick
)

// EventTypes lists the job events, for the gateway's connect reply.
var EventTypes = []string{
	EventJobCreated, EventJobUpdated, EventJobTriggered, EventJobStarted,
	EventJobCompleted, EventJobFailed, EventJobSkippedOverlap,
}

// Triggers: why a tick runs.
const (
	TriggerSchedule = "schedule" // on time
	TriggerRecovery = "recovery" // the latest missed tick, run_once_on_recovery
	TriggerManual   = "manual"   // RunNow
)

// TickData is the data of the tick events (all but job.created and
// job.updated, whose data is the Job).
type TickData struct {
	JobID        string    `json:"job_id"`
	Name         string    `json:"name"`
	ScheduledFor time.Time `json:"scheduled_for"`
	Attempt      int       `json:"attempt"`
	MaxAttempts  int       `json:"max_attempts"`
	RunID        string    `json:"run_id,omitempty"`
	JobRunID     string    `json:"job_run_id,omitempty"`
	Trigger      string    `json:"trigger,omitempty"`
	Status       string    `json:"status,omitempty"` // completed, failed or cancelled
	Error        string    `json:"error,omitempty"`
	// WillRetry is set on job.failed only; false on the last attempt.
	WillRetry *bool  `json:"will_retry,omitempty"`
	RetryInMS int64  `json:"retry_in_ms,omitempty"`
	Reason    string `json:"reason,omitempty"` // job.skipped_overlap: why
}

// newEvent builds a job event stamped by the engine's clock.
func (e *Engine) newEvent(typ string, data any, runID string, attempt int) event.Event {
	ev := event.New(typ, data)
	ev.TS = e.clock.Now().UTC()
	ev.RunID, ev.Attempt = runID, attempt
	return ev
}

// publish hands events to Config.Events, outside any lock.
func (e *Engine) publish(evs ...event.Event) {
	if e.cfg.Events == nil {
		return
	}
	for _, ev := range evs {
		e.cfg.Events(ev)
	}
}
