package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"agent/gateway/api"
)

// connLimiter caps the connections the gateway holds open, so idle or
// slow sockets cannot use up its file descriptors and lock authorised
// clients out. Accept never blocks on the cap: over it, the new
// connection takes the place of the oldest one doing no authorised work
// (a socket that has not sent a request yet, is still sending one, was
// refused, or is a WebSocket waiting for its connect frame, before an idle
// keep-alive connection of an authorised client); when every connection
// is doing authorised work, the new one is answered 503 and closed.
type connLimiter struct {
	net.Listener
	max int
	log *slog.Logger

	mu     sync.Mutex
	conns  map[*limitedConn]struct{}
	next   uint64
	warned atomic.Int64 // unix nanos of the last warning, to keep the log quiet under a flood
}

func newConnLimiter(ln net.Listener, max int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, log: log, conns: map[*limitedConn]struct{}{}}
}

// limitedConn is one accepted connection, counted until it closes.
type limitedConn struct {
	net.Conn
	l   *connLimiter
	seq uint64 // accept order

	// Guarded by l.mu.
	busy   int  // authorised requests or WebSocket sessions in progress
	authed bool // it has done authorised work at least once
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, victim := l.admit(c)
		if victim != nil {
			victim.Conn.Close() // its server goroutine sees the error and ends
			l.warn("connection cap reached; closing the oldest connections that do no authorised work")
		}
		if lc != nil {
			return lc, nil
		}
		l.warn("every connection is busy with authorised work; refusing new ones")
		refuseConn(c)
	}
}

// admit counts c in, making room by evicting the oldest connection doing
// no authorised work if the cap is reached; nil if there is none to evict.
func (l *connLimiter) admit(c net.Conn) (lc, victim *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		for cand := range l.conns {
			if cand.busy > 0 {
				continue
			}
			// Never-authorised connections go first, then idle ones of
			// authorised clients; the oldest first within each.
			if victim == nil || (victim.authed && !cand.authed) || (victim.authed == cand.authed && cand.seq < victim.seq) {
				victim = cand
			}
		}
		if victim == nil {
			return nil, nil
		}
		delete(l.conns, victim)
	}
	l.next++
	lc = &limitedConn{Conn: c, l: l, seq: l.next}
	l.conns[lc] = struct{}{}
	return lc, victim
}

// shrink rebuilds the set of connections in a map sized for what it holds.
func (l *connLimiter) shrink() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns = rebuilt(l.conns)
}

// warn logs at most every 10 seconds.
func (l *connLimiter) warn(msg string) {
	now := time.Now().UnixNano()
	last := l.warned.Load()
	if now-last < int64(10*time.Second) || !l.warned.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(msg, "max_connections", l.max)
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite half-closes, as net/http does before closing a connection
// whose request it did not read to the end, so the client gets the answer
// rather than a reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// protect marks the connection as doing authorised work until the
// returned func is called: it is not evicted meanwhile.
func (c *limitedConn) protect() (release func()) {
	c.l.mu.Lock()
	c.busy++
	c.authed = true
	c.l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.l.mu.Lock()
			c.busy--
			c.l.mu.Unlock()
		})
	}
}

// overCapacity is the answer of a connection refused over the cap.
var overCapacity = sync.OnceValue(func() []byte {
	body, _ := json.Marshal(api.HTTPError{Error: &api.Error{Code: api.CodeUnavailable, Retryable: true,
		Message: "the gateway has as many connections as it accepts, all busy; retry shortly"}})
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
})

// refuseConn answers 503 and closes. The write goes to a fresh socket's
// empty send buffer; the deadline only guards against the impossible.
func refuseConn(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_, _ = c.Write(overCapacity())
	c.Close()
}

type slotKey struct{}

// connContext puts the connection into every request's context, so the
// handlers can mark it as doing authorised work.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, slotKey{}, lc)
	}
	return ctx
}

// protectRequest marks r's connection as doing authorised work until the
// returned func is called.
func protectRequest(r *http.Request) (release func()) {
	return protector(r)()
}

// protector is what marks r's connection as doing authorised work, for
// use after r is done with (a WebSocket outlives its upgrade request).
func protector(r *http.Request) func() (release func()) {
	if lc, ok := r.Context().Value(slotKey{}).(*limitedConn); ok {
		return lc.protect
	}
	return func() func() { return func() {} }
}

// SyscallConn is the socket's, for the frames the gateway writes without
// blocking (frameConn).
func (c *limitedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
