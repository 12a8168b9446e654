package gateway

import (
	"context"
	"sync"
	"time"
)

// run is a run this gateway holds the lease of: queued or executing.
type run struct {
	id        string
	sessionID string
	resumed   bool // reclaimed or resumed: continue it rather than start it
	resend    bool // resumed with resend_unknown
	woken     bool // a waiting run the wake loop queued (waits.go)

	// Set by the queue under its lock.
	running bool
	cancel  context.CancelCauseFunc // while running
	done    chan struct{}           // closed once the run has its terminal event
}

// queue runs at most max runs at once, first come first served, and one
// run per session at a time: a session is one conversation, so a run
// starts only once the previous one has ended and its messages are part
// of the next run's context. A run whose session is busy does not hold
// up runs of other sessions behind it.
type queue struct {
	max   int
	start func(ctx context.Context, r *run) // executes r; the queue calls it on its own goroutine

	mu      sync.Mutex
	waiting []*run
	live    map[string]*run // waiting and running, by id
	busy    map[string]bool // sessions with a running run
	running int
	closed  bool // draining: nothing more starts
	wg      sync.WaitGroup
}

func newQueue(max int, start func(context.Context, *run)) *queue {
	return &queue{max: max, start: start, live: map[string]*run{}, busy: map[string]bool{}}
}

// add queues r and starts what can start. It reports whether r is
// already running, or errDraining once the queue is closed.
func (q *queue) add(r *run) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, errDraining
	}
	r.done = make(chan struct{})
	q.waiting = append(q.waiting, r)
	q.live[r.id] = r
	q.dispatchLocked()
	return r.running, nil
}

func (q *queue) dispatchLocked() {
	if q.closed {
		return
	}
	for i := 0; i < len(q.waiting) && q.running < q.max; {
		r := q.waiting[i]
		if q.busy[r.sessionID] {
			i++
			continue
		}
		q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
		q.running++
		q.busy[r.sessionID] = true
		ctx, cancel := context.WithCancelCause(context.Background())
		r.running, r.cancel = true, cancel
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			defer cancel(nil)
			q.start(ctx, r)
			q.finished(r)
		}()
	}
}

func (q *queue) finished(r *run) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	delete(q.busy, r.sessionID)
	delete(q.live, r.id)
	close(r.done)
	q.dispatchLocked()
}

// get returns a live run and whether it is running yet.
func (q *queue) get(id string) (*run, bool, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r, ok := q.live[id]
	if !ok {
		return nil, false, false
	}
	return r, r.running, true
}

// counts returns how many runs wait to start and how many are running.
func (q *queue) counts() (waiting, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting), q.running
}

// waitingIDs lists the runs waiting to start, for the lease heartbeat.
func (q *queue) waitingIDs() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]string, 0, len(q.waiting))
	for _, r := range q.waiting {
		out = append(out, r.id)
	}
	return out
}

// stop stops a live run with cause. A running run is cancelled and ends
// on its own goroutine; a waiting one is taken out of the queue and
// returned, for the caller to record how it ended, then to pass to
// forget.
func (q *queue) stop(id string, cause error) (waiting *run, found bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r, ok := q.live[id]
	if !ok {
		return nil, false
	}
	if r.running {
		r.cancel(cause)
		return nil, true
	}
	for i, w := range q.waiting {
		if w == r {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			break
		}
	}
	return r, true
}

// forget drops a run taken out of the queue by stop or close.
func (q *queue) forget(r *run) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.live, r.id)
	close(r.done)
}

// close stops starting runs and returns the ones still waiting, which
// the caller records and passes to forget.
func (q *queue) close() []*run {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	waiting := q.waiting
	q.waiting = nil
	return waiting
}

// drain waits up to grace for the running runs to end, then cancels the
// rest with cause and waits for them. When ctx ends first it cancels them
// at once and waits only briefly.
func (q *queue) drain(ctx context.Context, grace time.Duration, cause error) error {
	idle := make(chan struct{})
	go func() {
		q.wg.Wait()
		close(idle)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-idle:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	q.mu.Lock()
	for _, r := range q.live {
		if r.running {
			r.cancel(cause)
		}
	}
	q.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		// Told to hurry: the runs are cancelled already; give them a
		// moment to record how they ended.
		select {
		case <-idle:
		case <-time.After(hurryWait):
		}
		return ctx.Err()
	}
}

// hurryWait is how long a drain whose ctx ended still waits for cancelled
// runs to write their terminal events.
const hurryWait = 3 * time.Second
