package api

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

	"github.com/coder/websocket"
)

// ClientOptions say how a client dials and what it does with frames that
// answer no request.
type ClientOptions struct {
	Token string
	// HeaderToken sends the token as an Authorization header on the
	// upgrade instead of in the connect frame.
	HeaderToken bool
	Header      http.Header // extra upgrade headers, e.g. Origin
	NoConnect   bool        // leave the handshake to the caller
	Protocol    int         // 0: Protocol

	// OnEvent and OnError receive event and error frames in arrival
	// order, from the client's one reading goroutine.
	OnEvent func(EventFrame)
	OnError func(ErrorFrame)
}

// Client is one WebSocket connection to a gateway: the CLI's `run
// --gateway`, `attach` and `jobs`, and the tests.
type Client struct {
	ws     *websocket.Conn
	opts   ClientOptions
	nextID atomic.Int64

	mu      sync.Mutex
	pending map[string]chan callAnswer
	closed  bool
	err     error // why the connection ended
	done    chan struct{}

	// Connected is connect's answer, unless NoConnect.
	Connected ConnectResult
}

type callAnswer struct {
	res    Response
	result json.RawMessage
}

// DialError is a refused upgrade, with the HTTP status and the gateway's
// one-line reason when it gave one.
type DialError struct {
	Status int
	Err    error
}

func (e *DialError) Error() string {
	return fmt.Sprintf("gateway refused the connection (HTTP %d): %v", e.Status, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// WebSocketURL turns a gateway address (host:port, http://…, ws://…)
// into its WebSocket endpoint.
func WebSocketURL(addr string) string {
	u := strings.TrimSuffix(addr, "/")
	switch {
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://"):
		u = "ws://" + u
	}
	return strings.TrimSuffix(u, "/ws") + "/ws"
}

// Dial opens the gateway's WebSocket and, unless NoConnect, performs the
// connect handshake.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	h := http.Header{}
	for k, v := range opts.Header {
		h[k] = v
	}
	if opts.HeaderToken {
		h.Set("Authorization", "Bearer "+opts.Token)
	}
	ws, resp, err := websocket.Dial(ctx, WebSocketURL(addr), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return nil, &DialError{Status: resp.StatusCode, Err: err}
		}
		return nil, fmt.Errorf("connect to the gateway at %s: %w", addr, err)
	}
	ws.SetReadLimit(64 << 20)
	c := &Client{ws: ws, opts: opts, pending: map[string]chan callAnswer{}, done: make(chan struct{})}
	go c.read()
	if opts.NoConnect {
		return c, nil
	}
	p := ConnectParams{Protocol: opts.Protocol}
	if p.Protocol == 0 {
		p.Protocol = Protocol
	}
	if !opts.HeaderToken {
		p.Token = opts.Token
	}
	if err := c.Call(ctx, MethodConnect, p, &c.Connected); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) read() {
	defer close(c.done)
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.closed, c.err = true, err
			for id, ch := range c.pending {
				close(ch)
				delete(c.pending, id)
			}
			c.mu.Unlock()
			return
		}
		var head struct {
			Type   string          `json:"type"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(data, &head) != nil {
			continue
		}
		switch head.Type {
		case FrameRes:
			var res Response
			if json.Unmarshal(data, &res) != nil {
				continue
			}
			c.mu.Lock()
			ch, ok := c.pending[res.ID]
			delete(c.pending, res.ID)
			c.mu.Unlock()
			if ok {
				ch <- callAnswer{res: res, result: head.Result}
			}
		case FrameEvent:
			var ev EventFrame
			if json.Unmarshal(data, &ev) == nil && c.opts.OnEvent != nil {
				c.opts.OnEvent(ev)
			}
		case FrameError:
			var ef ErrorFrame
			if json.Unmarshal(data, &ef) == nil && c.opts.OnError != nil {
				c.opts.OnError(ef)
			}
		}
	}
}

// Send writes any frame as JSON. One larger than MaxFrame is refused here,
// as the gateway would refuse it by closing the connection.
func (c *Client) Send(ctx context.Context, frame any) error {
	data, err := json.Marshal(frame)
	if err != nil {
		return err
	}
	if len(data) > MaxFrame {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf(
			"the request is %d MiB, more than the %d MiB a gateway takes at once: give it smaller images, or run it here without --gateway",
			(len(data)+1<<20-1)>>20, MaxFrame>>20)}
	}
	return c.ws.Write(ctx, websocket.MessageText, data)
}

// Call sends a request and decodes its result into result (which may be
// nil). A refused request returns its *Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	id := strconv.FormatInt(c.nextID.Add(1), 10)
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	ch := make(chan callAnswer, 1)
	c.mu.Lock()
	if c.closed {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("connection closed: %w", err)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.Send(ctx, Request{Type: FrameReq, ID: id, Method: method, Params: raw}); err != nil {
		return err
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return fmt.Errorf("connection closed before the answer to %s: %w", method, c.Err())
		}
		if !a.res.OK {
			if a.res.Error == nil {
				return &Error{Code: CodeInternal, Message: "request failed without an error"}
			}
			return a.res.Error
		}
		if result != nil && len(a.result) > 0 {
			return json.Unmarshal(a.result, result)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

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

// ErrorCode returns the gateway error code of err, or "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
