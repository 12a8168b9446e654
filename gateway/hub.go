package gateway

import (
	"encoding/json"
	"slices"
	"sync"

	"agent/event"
	"agent/gateway/api"
)

// item is one persisted event on its way to subscribers. The WebSocket
// frame is encoded once, however many clients receive it.
type item struct {
	ev    event.Event
	frame []byte
}

func newItem(e event.Event) *item {
	frame, err := json.Marshal(eventFrame(e))
	if err != nil {
		panic("gateway: marshal event frame: " + err.Error()) // plain struct and raw JSON: cannot fail
	}
	return &item{ev: e, frame: frame}
}

func eventFrame(e event.Event) api.EventFrame {
	return api.EventFrame{
		Type: api.FrameEvent, Event: e.Type, SessionID: e.SessionID, RunID: e.RunID,
		PhaseID: e.PhaseID, Attempt: e.Attempt, Seq: e.Seq, TS: e.TS, Data: e.Data, Subagent: e.Subagent,
	}
}

// subscriber is one client attached to a hub: the events published to it
// and not yet taken. Its queue grows only with what it has not taken, so
// an attached client that keeps up costs a few words, not a buffer: a
// gateway holds one per client per session, and one more for job events.
type subscriber struct {
	// wake holds a token once something is queued after the last take, or
	// the subscriber was removed.
	wake chan struct{}
	// limit is how many events may wait: the hub's buffer, plus the
	// pending deltas it started with.
	limit int

	mu    sync.Mutex
	queue []*item
	// removed is set by unsubscribe, or by publish when the queue was
	// full (overflowed is then true too).
	removed    bool
	overflowed bool
	// start, once set by startOnDemand, brings a reader when there is
	// something to take and none is running (running), instead of one
	// parked on wake for as long as the client is attached: for a stream
	// that is mostly quiet, such as job events.
	start   func()
	running bool
}

// take returns what is queued, in order, reusing buf's storage (what it
// held must have been sent). open is false once the subscriber has been
// removed: what take returned then is the last of it.
func (sub *subscriber) take(buf []*item) (items []*item, open bool) {
	clear(buf)
	buf = buf[:0]
	if cap(buf) > 256 {
		buf = nil // a burst is over: give its storage back
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	items, sub.queue = sub.queue, buf
	return items, !sub.removed
}

// startOnDemand has start called, from then on, whenever there is
// something to take and no reader is running; the reader start begins
// takes with takeOrStop until that says stop. start runs under the hub's
// lock: it must only start a goroutine.
func (sub *subscriber) startOnDemand(start func()) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.start = start
	if len(sub.queue) > 0 || sub.removed {
		sub.signalLocked()
	}
}

// takeOrStop is take for a reader started on demand: stop says the queue
// is empty and the reader must return, leaving buf alone (the next event
// starts another reader, which may have started already).
func (sub *subscriber) takeOrStop(buf []*item) (items []*item, open, stop bool) {
	sub.mu.Lock()
	if len(sub.queue) == 0 && !sub.removed {
		sub.running = false
		sub.mu.Unlock()
		return nil, true, true
	}
	sub.mu.Unlock()
	items, open = sub.take(buf)
	return items, open, false
}

// remove marks the subscriber removed and wakes its reader; the caller
// holds the hub's lock and has taken it out of the hub.
func (sub *subscriber) remove(overflowed bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.removed, sub.overflowed = true, overflowed
	sub.signalLocked()
}

// signalLocked tells the reader there is something to take: a token on
// wake, or a reader started. sub.mu is held.
func (sub *subscriber) signalLocked() {
	switch {
	case sub.start == nil:
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	case !sub.running:
		sub.running = true
		sub.start()
	}
}

// hub fans a session's events out to its subscribers. publish never
// blocks: a subscriber that has more than its limit waiting is dropped
// and told so (take says it is no longer open, overflowed is set), and resumes
// from the store.
type hub struct {
	buffer int

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	last int64 // seq of the last event published (or persisted before this process)
	// pending holds the message.delta events published since the last
	// other event. The journal writes deltas only with the next other
	// event, so a new subscriber would find them neither in the store nor
	// in its live stream: it gets them from here.
	pending []*item
}

func newHub(buffer int, last int64) *hub {
	return &hub{buffer: buffer, subs: map[*subscriber]struct{}{}, last: last}
}

// subscribe attaches a subscriber. It returns the seq of the last event
// published so far: every event after it will be queued, and every event
// up to it is in the store or (deltas) already queued.
func (h *hub) subscribe() (*subscriber, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sub := &subscriber{wake: make(chan struct{}, 1), limit: h.buffer + len(h.pending)}
	if len(h.pending) > 0 {
		sub.queue = slices.Clone(h.pending)
		sub.wake <- struct{}{}
	}
	h.subs[sub] = struct{}{}
	return sub, h.last
}

// unsubscribe detaches sub; it is safe to call more than once.
func (h *hub) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[sub]; ok {
		delete(h.subs, sub)
		sub.remove(false)
	}
}

// publish hands an event to every subscriber. Callers publish in seq
// order, after the journal has accepted the event.
func (h *hub) publish(it *item) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = it.ev.Seq
	if it.ev.Type == event.MessageDelta {
		h.pending = append(h.pending, it)
	} else {
		clear(h.pending)
		h.pending = h.pending[:0]
	}
	for sub := range h.subs {
		sub.mu.Lock()
		full := len(sub.queue) >= sub.limit
		if !full {
			sub.queue = append(sub.queue, it)
			if len(sub.queue) == 1 {
				sub.signalLocked()
			}
		}
		sub.mu.Unlock()
		if full {
			delete(h.subs, sub)
			sub.remove(true)
		}
	}
}

// lastSeq is the seq of the last event published (or persisted before
// this process).
func (h *hub) lastSeq() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// size is the number of subscribers.
func (h *hub) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
