package gateway

import (
	"encoding/json"
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

// subscriber is one client attached to a session's live stream.
type subscriber struct {
	// ch is closed when the subscriber is removed: by unsubscribe, or by
	// publish when it was full (overflowed is then true).
	ch         chan *item
	overflowed bool
}

// hub fans a session's events out to its subscribers. publish never
// blocks: a subscriber whose buffer is full is dropped and told so (its
// channel closes with overflowed set), and resumes from the store.
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
// published so far: every event after it will be in the channel, and
// every event up to it is in the store or (deltas) already in the channel.
func (h *hub) subscribe() (*subscriber, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sub := &subscriber{ch: make(chan *item, h.buffer+len(h.pending))}
	for _, it := range h.pending {
		sub.ch <- it
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
		close(sub.ch)
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
		h.pending = h.pending[:0]
	}
	for sub := range h.subs {
		select {
		case sub.ch <- it:
		default:
			sub.overflowed = true
			delete(h.subs, sub)
			close(sub.ch)
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
