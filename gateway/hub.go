package gateway

import (
	"encoding/json"
	"runtime"
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
//
// It is read in one of two ways. A subscriber made by subscribe has a
// reader that waits on wake for as long as it is attached. Once onDemand
// is called, no goroutine waits: the hub's fan-out writes what is
// published straight to the client (sendNow) when its socket takes it at
// once, and a reader (start) runs only while there is more than that to
// do: a client whose socket is full, or the end of the stream.
type subscriber struct {
	// wake holds a token once something is queued after the last take, or
	// the subscriber was removed.
	wake chan struct{}
	// limit is how many events may wait: the hub's buffer, plus the
	// pending deltas it started with.
	limit int

	mu    sync.Mutex
	queue []*item
	spare []*item // the storage of the queue the fan-out took last
	// removed is set by unsubscribe, or by publish when the queue was
	// full (overflowed is then true too).
	removed    bool
	overflowed bool
	// start, once set by onDemand, brings a reader: it begins takes with
	// takeOrStop until that says stop. running is set while the reader,
	// or the fan-out, has the subscriber: nothing else may start.
	start   func()
	sendNow sender
	// end, if set by onDemand, ends the stream of a subscriber removed with
	// nothing queued and no reader, instead of a reader started for it: a
	// thousand clients leaving at once start no goroutine each.
	end     func()
	running bool
	ready   bool // in the hub's list for its fan-out
}

// A sender writes items to a client if its socket takes them at once,
// without blocking, building the frames in b. It returns those it did not
// write, in order; blocked says a reader must take over, which then
// writes them (and the rest of a frame the socket took only part of).
type sender func(items []*item, b *frameBatch) (left []*item, blocked bool)

// take returns what is queued, in order, reusing buf's storage (what it
// held must have been sent). open is false once the subscriber has been
// removed: what take returned then is the last of it.
func (sub *subscriber) take(buf []*item) (items []*item, open bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.takeLocked(buf), !sub.removed
}

func (sub *subscriber) takeLocked(buf []*item) []*item {
	clear(buf)
	buf = buf[:0]
	if cap(buf) > 256 {
		buf = nil // a burst is over: give its storage back
	}
	items := sub.queue
	sub.queue = buf
	return items
}

// onDemand reads the subscriber from now on as the type's comment says:
// start brings a reader, sendNow has the fan-out write, end (which must
// not block) ends the stream of one removed with nothing to send. It
// reports whether the caller must be the reader now (something is
// queued, or it was removed): it then takes with takeOrStop, or calls
// start itself.
func (sub *subscriber) onDemand(start func(), sendNow sender, end func()) (read bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.start, sub.sendNow, sub.end = start, sendNow, end
	sub.running = len(sub.queue) > 0 || sub.removed
	return sub.running
}

// takeOrStop is take for a reader started on demand: stop says the queue
// is empty and the reader must return, leaving buf alone (the next event
// starts another reader, which may have started already).
func (sub *subscriber) takeOrStop(buf []*item) (items []*item, open, stop bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.queue) == 0 && !sub.removed {
		sub.running = false
		return nil, true, true
	}
	return sub.takeLocked(buf), !sub.removed, false
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
// wake, or a reader started. It reports whether the hub's fan-out should
// write it instead; only publish, which can hand it over, asks. sub.mu is
// held.
func (sub *subscriber) signalLocked() (fanOut bool) {
	switch {
	case sub.start == nil:
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	case sub.running:
	case sub.sendNow != nil && !sub.removed:
		return true
	case sub.end != nil && len(sub.queue) == 0:
		sub.running = true // ended: nothing starts again
		sub.end()
	default:
		sub.running = true
		sub.start()
	}
	return false
}

// sendReady writes, for the hub's fan-out, what is queued for a
// subscriber read on demand, until nothing is, or hands it to a reader:
// its socket is full, or it was removed meanwhile. b is the fan-out
// goroutine's storage for the frames.
func (sub *subscriber) sendReady(b *frameBatch) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.ready = false
	if sub.running {
		return // a reader has it
	}
	sub.running = true // publish and remove leave it to the fan-out now
	for len(sub.queue) > 0 && !sub.removed {
		items := sub.takeLocked(sub.spare)
		sub.spare = nil
		sub.mu.Unlock()
		left, blocked := sub.sendNow(items, b)
		sub.mu.Lock()
		if blocked {
			sub.queue = append(slices.Clip(left), sub.queue...)
			sub.start()
			return
		}
		clear(items) // sent: their frames need not stay
		sub.spare = items
	}
	sub.running = false
	if sub.removed {
		sub.signalLocked() // a reader, or end, ends the stream
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
	// ready lists the subscribers read on demand that have something for
	// the fan-out, which runs while fanning is set.
	ready   []*subscriber
	fanning bool
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
			if len(sub.queue) == 1 && sub.signalLocked() && !sub.ready {
				sub.ready = true
				h.ready = append(h.ready, sub)
			}
		}
		sub.mu.Unlock()
		if full {
			delete(h.subs, sub)
			sub.remove(true)
		}
	}
	if len(h.ready) > 0 && !h.fanning {
		h.fanning = true
		go h.fanOut()
	}
}

// fanOut writes what publish queued for the ready subscribers, until none
// is left, from a goroutine per processor at most: one event to a
// thousand clients wakes no goroutine per client, and costs each little
// more than a system call.
func (h *hub) fanOut() {
	var batch []*subscriber
	for {
		h.mu.Lock()
		clear(batch)
		batch, h.ready = h.ready, batch[:0]
		if len(batch) == 0 {
			h.fanning = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		sendAll(batch)
	}
}

// fanOutStripe is how many subscribers make it worth writing to them
// from more than one goroutine.
const fanOutStripe = 64

// sendAll has sendReady called for each subscriber, spread over as many
// goroutines as there are processors, if there are enough of them: the
// system calls are most of the cost.
func sendAll(subs []*subscriber) {
	workers := max(1, min(runtime.GOMAXPROCS(0), len(subs)/fanOutStripe))
	stripe := func(w int) {
		var b frameBatch
		for i := w; i < len(subs); i += workers {
			subs[i].sendReady(&b)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Go(func() { stripe(w) })
	}
	stripe(0)
	wg.Wait()
}

// shrink rebuilds the subscriber set in a map sized for what it holds.
func (h *hub) shrink() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs = rebuilt(h.subs)
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
