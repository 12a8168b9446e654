package supervisor

import (
	"context"
	"sync"
	"time"

	"agent/event"
	"agent/store"
)

// Sink persists a run's events, assigning their seq, and shows them or
// fans them out. Emit returns once the event is persisted.
type Sink interface {
	Emit(ctx context.Context, e event.Event) error
}

// watchedSink remembers the first event it could not persist: by the time
// the loop stops on it, the error says only which emit failed.
type watchedSink struct {
	Sink
	mu  sync.Mutex
	err error
}

func (w *watchedSink) Emit(ctx context.Context, e event.Event) error {
	err := w.Sink.Emit(ctx, e)
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	return err
}

func (w *watchedSink) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// journalSink is the sink of a run driven by one process: its events go
// through the run's journal, or its session's, then to show. It is safe
// for concurrent use: harness phases run in parallel.
type journalSink struct {
	runID   string
	mu      sync.Mutex // shown in seq order, even from parallel phases
	journal *store.Journal
	show    func(event.Event)
}

// openJournal returns the sink of a run driven by this process alone.
func (s *Supervisor) openJournal(ctx context.Context, r *store.Run, show func(event.Event)) (*journalSink, error) {
	if show == nil {
		show = func(event.Event) {}
	}
	j, err := s.journal(ctx, r.ID, r.SessionID)
	if err != nil {
		return nil, err
	}
	return s.sink(r, j, show), nil
}

// journal opens the journal a run's events go to: a run in a gateway
// session shares the session's sequence.
func (s *Supervisor) journal(ctx context.Context, runID, sessionID string) (*store.Journal, error) {
	if sessionID != "" {
		return s.db.SessionJournal(ctx, sessionID)
	}
	return s.db.Journal(ctx, runID, "")
}

// deltaFlush is how long a streamed delta may wait to be stored when the
// store is the only way it is seen (Config.Unshown).
const deltaFlush = 200 * time.Millisecond

func (s *Supervisor) sink(r *store.Run, j *store.Journal, show func(event.Event)) *journalSink {
	// Only the lease holder writes: a process that lost the run stops.
	j.Fence(s.cfg.Owner)
	if s.cfg.Unshown {
		j.Unshown(deltaFlush)
	}
	return &journalSink{runID: r.ID, journal: j, show: show}
}

func (k *journalSink) Emit(ctx context.Context, e event.Event) error {
	if e.RunID == "" {
		e.RunID = k.runID
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e, err := k.journal.Append(ctx, e)
	if err != nil {
		return err
	}
	k.show(e)
	return nil
}

// close writes what the journal still buffers and gives back the seqs it
// reserved for deltas that never came.
func (k *journalSink) close(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.journal.Close(ctx)
}
