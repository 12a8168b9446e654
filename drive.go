package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"agent/event"
	"agent/store"
)

// driving is what a process needs while it holds a run's lease and drives
// it: a context that Ctrl-C, --timeout and a lost lease cancel, the sink
// that persists and shows events, and the lease heartbeat.
type driving struct {
	c       *cli.Context
	db      *store.DB
	run     *store.Run
	ctx     context.Context
	persist context.Context // for writes that must happen even after ctx ends
	sink    *runSink
	began   time.Time
	undo    []func()
}

// startDriving sets up signals, timeout, lease heartbeat, journal and
// display for a run whose lease owner already holds.
func startDriving(c *cli.Context, db *store.DB, r *store.Run, owner string, harness bool) (*driving, error) {
	d := &driving{c: c, db: db, run: r, began: time.Now()}
	ctx, cancel := context.WithCancelCause(c.Context)
	d.undo = append(d.undo, func() { cancel(nil) })
	d.undo = append(d.undo, cancelOnSignal(ctx, cancel))
	if t := c.Duration("timeout"); t > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, t, fmt.Errorf("timed out after %s: %w", t, errTimeout))
		d.undo = append(d.undo, stop)
	}
	d.ctx, d.persist = ctx, context.WithoutCancel(ctx)
	d.undo = append(d.undo, func() { _ = db.ReleaseLease(d.persist, r.ID, owner) })
	d.undo = append(d.undo, keepLease(ctx, cancel, db, r.ID, owner))
	// A run in a gateway session shares the session's sequence.
	journal, err := db.Journal(ctx, r.ID, "")
	if r.SessionID != "" {
		journal, err = db.SessionJournal(ctx, r.SessionID)
	}
	if err != nil {
		d.close()
		return nil, err
	}
	if r.SessionID == "" {
		// This process alone writes the run, so whole messages and
		// artifacts may ride along with the next durable event.
		journal.SetLazy(event.MessageCompleted, event.ArtifactCreated)
	}
	d.sink = &runSink{journal: journal, show: newDisplay(c, harness)}
	d.undo = append(d.undo, d.sink.close)
	return d, nil
}

// close undoes the set-up in reverse: flush and close the display, stop
// the heartbeat, release the lease, stop watching signals.
func (d *driving) close() {
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i]()
	}
	d.undo = nil
}

// totals are the turns and tokens the store has counted for the run.
func (d *driving) totals() (int, event.Usage) {
	cur, err := d.db.GetRun(d.persist, d.run.ID)
	if err != nil {
		return 0, event.Usage{}
	}
	return cur.Turns, cur.Usage
}

// finish records the run's last event and turns a non-zero exit code
// into an *exitError.
func (d *driving) finish(typ string, fin event.RunFinishedData) error {
	fin.DurationMS = time.Since(d.began).Milliseconds()
	if err := d.sink.Emit(d.persist, event.New(typ, fin)); err != nil {
		return err
	}
	if fin.ExitCode == 0 {
		return nil
	}
	msg := ""
	if d.c.Bool("json") {
		msg = fin.Reason // without --json the display already said it
	}
	return &exitError{code: fin.ExitCode, msg: msg}
}

// repeat calls fn every d until ctx ends, fn returns false, or the
// returned stop is called; stop waits until fn is no longer running.
func repeat(ctx context.Context, d time.Duration, fn func() bool) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if !fn() {
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
