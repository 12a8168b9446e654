// Package gatewaytest is a small WebSocket client of the gateway protocol
// for tests: it dials, connects, sends requests and collects event frames.
package gatewaytest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"agent/gateway/api"

	"github.com/coder/websocket"
)

// Options say how to dial.
type Options struct {
	Token string
	// HeaderToken sends the token as an Authorization header on the
	// upgrade instead of in the connect frame.
	HeaderToken bool
	Header      http.Header // extra upgrade headers, e.g. Origin
	// NoConnect leaves the handshake to the test (Send the frames).
	NoConnect bool
	Protocol  int // 0: api.Protocol
}

// Client is one connection that keeps every event and error frame, in
// arrival order, for the test to read.
type Client struct {
	*api.Client

	mu     sync.Mutex
	cond   *sync.Cond
	events []api.EventFrame
	errs   []api.ErrorFrame
	closed bool

	// Connected is connect's answer, unless NoConnect.
	Connected api.ConnectResult
}

// DialError is a refused upgrade.
type DialError = api.DialError

// Dial opens ws://addr/ws (addr is host:port or an http:// URL) and,
// unless opts.NoConnect, performs the connect handshake.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	c := &Client{}
	c.cond = sync.NewCond(&c.mu)
	gc, err := api.Dial(ctx, addr, api.ClientOptions{
		Token: opts.Token, HeaderToken: opts.HeaderToken, Header: opts.Header,
		NoConnect: opts.NoConnect, Protocol: opts.Protocol,
		OnEvent: func(ev api.EventFrame) { c.record(func() { c.events = append(c.events, ev) }) },
		OnError: func(ef api.ErrorFrame) { c.record(func() { c.errs = append(c.errs, ef) }) },
	})
	if err != nil {
		return nil, err
	}
	c.Client, c.Connected = gc, gc.Connected
	go func() {
		<-gc.Done()
		c.record(func() { c.closed = true })
	}()
	return c, nil
}

func (c *Client) record(f func()) {
	c.mu.Lock()
	f()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// Events returns a copy of the event frames received so far.
func (c *Client) Events() []api.EventFrame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]api.EventFrame(nil), c.events...)
}

// Errors returns the error frames received so far.
func (c *Client) Errors() []api.ErrorFrame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]api.ErrorFrame(nil), c.errs...)
}

// WaitEvent waits for an event frame that match accepts, and returns
// every frame received so far.
func (c *Client) WaitEvent(ctx context.Context, match func(api.EventFrame) bool) ([]api.EventFrame, error) {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for _, ev := range c.events {
			if match(ev) {
				return append([]api.EventFrame(nil), c.events...), nil
			}
		}
		if c.closed {
			return append([]api.EventFrame(nil), c.events...), fmt.Errorf("connection closed: %w", c.Client.Err())
		}
		if ctx.Err() != nil {
			return append([]api.EventFrame(nil), c.events...), ctx.Err()
		}
		c.cond.Wait()
	}
}

// WaitTerminal waits for the terminal event of a run.
func (c *Client) WaitTerminal(ctx context.Context, runID string) ([]api.EventFrame, error) {
	return c.WaitEvent(ctx, func(ev api.EventFrame) bool {
		return ev.RunID == runID && IsTerminal(ev.Event)
	})
}

// WaitClosed waits for the connection to end and returns why.
func (c *Client) WaitClosed(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.closed {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.cond.Wait()
	}
	return c.Client.Err()
}

// CloseStatus is the WebSocket close status of err, or -1.
func CloseStatus(err error) websocket.StatusCode { return websocket.CloseStatus(err) }

// IsTerminal reports whether an event type ends a run.
func IsTerminal(t string) bool {
	switch t {
	case "run.completed", "run.failed", "run.cancelled", "run.interrupted":
		return true
	}
	return false
}

// ErrCode returns the gateway error code of err, or "".
func ErrCode(err error) string { return api.ErrorCode(err) }

// Patience is the least time a test waits for something that should
// happen: a loaded machine may take many times longer to schedule a
// process or a goroutine than a quiet one, and only a failing test waits
// it out.
const Patience = 2 * time.Minute

// Timeout is a context for one step of a test that should take d at most
// on a quiet machine: it ends after d or Patience, whichever is longer.
func Timeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), max(d, Patience))
}
