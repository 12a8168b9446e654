// Package gatewaytest is a small WebSocket client of the gateway protocol
// for tests: it dials, connects, sends requests and collects event frames.
package gatewaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"agent/gateway"
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
	Protocol  int // 0: gateway.Protocol
}

// Client is one connection. Events and error frames are kept in arrival
// order for the test to read.
type Client struct {
	ws     *websocket.Conn
	nextID atomic.Int64

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]chan gateway.Response
	raw     map[string]json.RawMessage // results, by request id
	events  []gateway.EventFrame
	errs    []gateway.ErrorFrame
	closed  bool
	err     error // why the connection ended

	// Connected is connect's answer, unless NoConnect.
	Connected gateway.ConnectResult
}

// Dial opens ws://addr/ws (addr is host:port or an http:// URL) and,
// unless opts.NoConnect, performs the connect handshake.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	u := strings.TrimSuffix(strings.Replace(addr, "http://", "ws://", 1), "/")
	if !strings.HasPrefix(u, "ws://") {
		u = "ws://" + u
	}
	h := http.Header{}
	for k, v := range opts.Header {
		h[k] = v
	}
	if opts.HeaderToken {
		h.Set("Authorization", "Bearer "+opts.Token)
	}
	ws, resp, err := websocket.Dial(ctx, u+"/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return nil, &DialError{Status: resp.StatusCode, Err: err}
		}
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	c := &Client{ws: ws, pending: map[string]chan gateway.Response{}, raw: map[string]json.RawMessage{}}
	c.cond = sync.NewCond(&c.mu)
	go c.read()
	if opts.NoConnect {
		return c, nil
	}
	p := gateway.ConnectParams{Protocol: opts.Protocol}
	if p.Protocol == 0 {
		p.Protocol = gateway.Protocol
	}
	if !opts.HeaderToken {
		p.Token = opts.Token
	}
	if err := c.Call(ctx, gateway.MethodConnect, p, &c.Connected); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DialError is a refused upgrade.
type DialError struct {
	Status int
	Err    error
}

func (e *DialError) Error() string { return fmt.Sprintf("dial: HTTP %d: %v", e.Status, e.Err) }

func (c *Client) read() {
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.closed, c.err = true, err
			for id, ch := range c.pending {
				close(ch)
				delete(c.pending, id)
			}
			c.cond.Broadcast()
			c.mu.Unlock()
			return
		}
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(data, &head)
		c.mu.Lock()
		switch head.Type {
		case gateway.FrameRes:
			var res gateway.Response
			var body struct {
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal(data, &res) == nil && json.Unmarshal(data, &body) == nil {
				c.raw[res.ID] = body.Result
				if ch, ok := c.pending[res.ID]; ok {
					delete(c.pending, res.ID)
					ch <- res
				}
			}
		case gateway.FrameEvent:
			var ev gateway.EventFrame
			if json.Unmarshal(data, &ev) == nil {
				c.events = append(c.events, ev)
			}
		case gateway.FrameError:
			var ef gateway.ErrorFrame
			if json.Unmarshal(data, &ef) == nil {
				c.errs = append(c.errs, ef)
			}
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// Send writes any frame as JSON.
func (c *Client) Send(ctx context.Context, frame any) error {
	data, err := json.Marshal(frame)
	if err != nil {
		return err
	}
	return c.ws.Write(ctx, websocket.MessageText, data)
}

// Call sends a request and decodes its result into result (which may be
// nil). A refused request returns its *gateway.Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	id := strconv.FormatInt(c.nextID.Add(1), 10)
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	ch := make(chan gateway.Response, 1)
	c.mu.Lock()
	if c.closed {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("connection closed: %w", err)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.Send(ctx, gateway.Request{Type: gateway.FrameReq, ID: id, Method: method, Params: raw}); err != nil {
		return err
	}
	select {
	case res, ok := <-ch:
		if !ok {
			return fmt.Errorf("connection closed before the answer to %s: %w", method, c.Err())
		}
		if !res.OK {
			return res.Error
		}
		if result != nil {
			c.mu.Lock()
			body := c.raw[id]
			delete(c.raw, id)
			c.mu.Unlock()
			return json.Unmarshal(body, result)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Events returns a copy of the event frames received so far.
func (c *Client) Events() []gateway.EventFrame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]gateway.EventFrame(nil), c.events...)
}

// Errors returns the error frames received so far.
func (c *Client) Errors() []gateway.ErrorFrame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]gateway.ErrorFrame(nil), c.errs...)
}

// WaitEvent waits for an event frame that match accepts, and returns
// every frame received so far.
func (c *Client) WaitEvent(ctx context.Context, match func(gateway.EventFrame) bool) ([]gateway.EventFrame, error) {
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
				return append([]gateway.EventFrame(nil), c.events...), nil
			}
		}
		if c.closed {
			return append([]gateway.EventFrame(nil), c.events...), fmt.Errorf("connection closed: %w", c.err)
		}
		if ctx.Err() != nil {
			return append([]gateway.EventFrame(nil), c.events...), ctx.Err()
		}
		c.cond.Wait()
	}
}

// WaitTerminal waits for the terminal event of a run.
func (c *Client) WaitTerminal(ctx context.Context, runID string) ([]gateway.EventFrame, error) {
	return c.WaitEvent(ctx, func(ev gateway.EventFrame) bool {
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
	return c.err
}

// Err is why the connection ended, nil while it is open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection.
func (c *Client) Close() {
	c.ws.Close(websocket.StatusNormalClosure, "")
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
func ErrCode(err error) string {
	var e *gateway.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Timeout is a context for one step of a test.
func Timeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
