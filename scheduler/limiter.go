package scheduler

import "sync"

// limiter bounds the runs in flight across all jobs. Ticks queue for a
// slot in the order they were claimed, so a waiting tick is not overtaken
// by later ones.
type limiter struct {
	mu      sync.Mutex
	free    int
	waiters []chan struct{}
}

func newLimiter(n int) *limiter { return &limiter{free: n} }

// enqueue joins the queue and returns a channel that is closed when the
// caller holds a slot. The caller must release a slot it got, or abandon
// the channel if it stops waiting.
func (l *limiter) enqueue() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if l.free > 0 && len(l.waiters) == 0 {
		l.free--
		close(ch)
		return ch
	}
	l.waiters = append(l.waiters, ch)
	return ch
}

// take takes a slot for a run that is already going, even if none is
// free: the ticks behind it wait until enough runs have ended.
func (l *limiter) take() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free--
}

// abandon leaves the queue; a slot granted meanwhile is passed on.
func (l *limiter) abandon(ch chan struct{}) {
	l.mu.Lock()
	for i, w := range l.waiters {
		if w == ch {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			l.mu.Unlock()
			return
		}
	}
	l.mu.Unlock()
	l.release()
}

// release gives a slot to the first waiter, or back to the pool; first it
// repays slots taken beyond the bound.
func (l *limiter) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.free >= 0 && len(l.waiters) > 0 {
		close(l.waiters[0])
		l.waiters = l.waiters[1:]
		return
	}
	l.free++
}
