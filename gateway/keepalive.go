package gateway

import (
	"context"
	"maps"
	"runtime"
	"runtime/debug"
	"time"
)

const (
	writeTimeout = 30 * time.Second // a client that takes no frame for this long is gone
	pingInterval = 30 * time.Second // a client that does not answer a ping within this is gone
	// keepaliveTick is how often keepalive looks at every connection: the
	// precision of writeTimeout.
	keepaliveTick = 3 * time.Second
	// giveBackAfter is how many clients must have left before the memory
	// they held is given back to the system.
	giveBackAfter = 100
)

// keepalive looks after every connection from one goroutine, instead of a
// goroutine and a timer per client: it pings each client every
// pingInterval (a short-lived goroutine waits for the pong), so one that
// vanished without closing (a dropped network, a sleeping laptop) does
// not keep its session locks, closes a
// connection whose frames have made no progress for writeTimeout, and
// gives memory back once many clients have left. Frames are written
// without a deadline of their own: a context and a timer per frame per
// client cost more than the frame.
func (s *Server) keepalive() {
	t := time.NewTicker(keepaliveTick)
	defer t.Stop()
	var mem memoryWatch
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		now := time.Now()
		s.connMu.Lock()
		conns := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		gone := s.connsGone
		s.connMu.Unlock()
		for _, c := range conns {
			if c.stalled(now) {
				s.log.Warn("client took no frame for too long; disconnected", "conn", c.id, "after", writeTimeout)
				c.ws.CloseNow()
				continue
			}
			if c.live.Load() && now.Sub(c.pinged) >= pingInterval {
				c.pinged = now
				c.ping()
			}
		}
		if mem.left(gone) {
			s.shrinkClientSets()
			// Two collections: what they left in sync.Pools goes only at
			// the second.
			runtime.GC()
			debug.FreeOSMemory()
		}
	}
}

// stalled reports whether c has had a frame on its way and none written
// for writeTimeout. Only keepalive calls it.
func (c *conn) stalled(now time.Time) bool {
	begun, done := c.writesBegun.Load(), c.writesDone.Load()
	if begun == done || done != c.doneSeen {
		c.doneSeen, c.stallSince = done, time.Time{}
		return false
	}
	if c.stallSince.IsZero() {
		c.stallSince = now
	}
	return now.Sub(c.stallSince) >= writeTimeout
}

// shrinkClientSets rebuilds the sets that hold an entry per client: a Go
// map keeps the room it grew to when its entries are deleted, so after a
// thousand clients tables for a thousand would stay, and each event's
// publish would walk them.
func (s *Server) shrinkClientSets() {
	s.connMu.Lock()
	s.conns = rebuilt(s.conns)
	s.connMu.Unlock()
	if l, ok := s.ln.(*connLimiter); ok {
		l.shrink()
	}
	for _, sess := range s.sessions.all() {
		sess.hub.shrink()
	}
	if s.jobEvents != nil {
		s.jobEvents.shrink()
	}
}

// rebuilt is a copy of m in a map sized for what it holds now.
func rebuilt[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	maps.Copy(out, m)
	return out
}

// ping sends a ping and closes the connection if no pong comes within
// pingInterval.
func (c *conn) ping() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, pingInterval)
		defer cancel()
		if c.ws.Ping(ctx) != nil {
			c.ws.CloseNow()
		}
	}()
}

// memoryWatch tells when many clients have left. The Go runtime keeps
// what they held until later collections, which an idle gateway does not
// make, so it would stay resident long after they are gone. Memory is
// given back twice, a tick apart: a release can miss free pages, among
// them those a processor running at the time keeps for its next
// allocations (the runtime empties idle processors' caches only). After a
// thousand clients left, the first release missed 0.9-2.8 MB in 12 runs
// of 60, more than those caches hold; the second released it in 4 of the
// 12.
type memoryWatch struct {
	given, last int
	again       bool // give back at the next tick too
}

// left is told at each tick how many connections have ended in all; it
// says true once giveBackAfter more have ended since it last did, and
// none since the tick before, and again at the tick after that. Clients
// that come and go between two ticks count too.
func (m *memoryWatch) left(gone int) bool {
	settled := gone == m.last
	m.last = gone
	if m.again {
		m.again = false
		return true
	}
	if settled && gone-m.given >= giveBackAfter {
		m.given = gone
		m.again = true
		return true
	}
	return false
}
