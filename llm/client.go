package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Config configures a Client. Zero fields take the defaults noted.
type Config struct {
	BaseURL     string // e.g. https://api.openai.com/v1; required
	APIKey      string // sent as a Bearer token when non-empty
	MaxAttempts int    // total attempts per call; default 5
	// IdleTimeout fails an attempt (retryably) when the server sends
	// nothing for this long, before or during the stream; default 5m,
	// generous because local models can take minutes for a first token.
	IdleTimeout time.Duration
	BackoffBase time.Duration // first retry delay before jitter; default 500ms
	BackoffCap  time.Duration // largest backoff before jitter; default 30s
	HTTPClient  *http.Client  // default: a client without an overall timeout, as streams run long
	OnRetry     func(RetryInfo)
	// Sleep waits between attempts; tests inject it. The default is a
	// timer that returns ctx.Err() when ctx ends first.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0,1) for backoff jitter; default math/rand/v2.
	Rand      func() float64
	UserAgent string // default "agent"
}

// Client talks to one OpenAI-compatible Chat Completions endpoint. It is
// safe for concurrent use.
type Client struct {
	cfg      Config
	endpoint string // BaseURL + /chat/completions
}

var _ Model = (*Client)(nil)

// New validates cfg, fills in defaults and returns a Client.
func New(cfg Config) (*Client, error) {
	base := strings.TrimRight(strings.TrimSpace(cfg.BaseURL), "/")
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("model base url %q: %w", cfg.BaseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("model base url %q: want an http or https url such as https://api.openai.com/v1", cfg.BaseURL)
	}
	cfg.BaseURL = base
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 500 * time.Millisecond
	}
	if cfg.BackoffCap <= 0 {
		cfg.BackoffCap = 30 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "agent"
	}
	return &Client{cfg: cfg, endpoint: base + "/chat/completions"}, nil
}

// Stream sends req with stream: true and assembles the streamed reply,
// calling onText with each non-empty content delta as it arrives.
//
// Failed attempts are retried when transient (429, 5xx, connection
// errors, truncated streams, transient in-stream errors). A retried
// attempt may already have delivered some text to onText; the next
// attempt starts the reply over, so callers that display deltas should
// be ready to see a reply restart (the retry is announced via OnRetry).
// The returned Response always holds only the successful attempt.
func (c *Client) Stream(ctx context.Context, req Request, onText func(string)) (*Response, error) {
	body, err := encodeRequest(req, true)
	if err != nil {
		return nil, err
	}
	return c.retry(ctx, func() (*Response, error) {
		return c.attempt(ctx, body, true, onText)
	})
}

// Complete sends req with "stream": false (sent explicitly, as some
// endpoints require) and returns the whole reply. It retries like Stream.
func (c *Client) Complete(ctx context.Context, req Request) (*Response, error) {
	body, err := encodeRequest(req, false)
	if err != nil {
		return nil, err
	}
	return c.retry(ctx, func() (*Response, error) {
		return c.attempt(ctx, body, false, nil)
	})
}

// retry runs try up to MaxAttempts times while it fails retryably.
func (c *Client) retry(ctx context.Context, try func() (*Response, error)) (*Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := try()
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("model request: %w", ctx.Err())
		}
		var e *Error
		if !errors.As(err, &e) {
			return nil, err
		}
		if !e.Retryable || attempt >= c.cfg.MaxAttempts {
			e.Attempts = attempt // only the final error says how many were made
			return nil, e
		}
		delay := c.backoff(attempt, e.RetryAfter)
		if c.cfg.OnRetry != nil {
			c.cfg.OnRetry(RetryInfo{Attempt: attempt, MaxAttempts: c.cfg.MaxAttempts, Delay: delay, Err: e, Status: e.Status})
		}
		if err := c.cfg.Sleep(ctx, delay); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("model request: %w", ctx.Err())
			}
			return nil, fmt.Errorf("model request: wait before retry: %w", err)
		}
	}
}

// attempt makes one HTTP request and reads the reply, streamed or not.
func (c *Client) attempt(ctx context.Context, body []byte, stream bool, onText func(string)) (*Response, error) {
	// A server that accepts the request and then goes silent would hang the
	// run forever; the watchdog turns silence into a retryable error.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(c.cfg.IdleTimeout, func() { cancel(errIdle) })
	defer watchdog.Stop()
	resp, err := c.exchange(ctx, body, stream, onText, watchdog)
	if err != nil && errors.Is(context.Cause(ctx), errIdle) {
		return nil, &Error{Kind: KindTruncated, Retryable: true, Err: err,
			Message: fmt.Sprintf("no data from the model for %s", c.cfg.IdleTimeout)}
	}
	return resp, err
}

var errIdle = errors.New("model stream idle")

// idleReader pushes the watchdog back on every read that returns data.
type idleReader struct {
	r        io.Reader
	watchdog *time.Timer
	idle     time.Duration
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.watchdog.Reset(r.idle)
	}
	return n, err
}

func (c *Client) exchange(ctx context.Context, body []byte, stream bool, onText func(string), watchdog *time.Timer) (*Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build model request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream, application/json")
	hreq.Header.Set("User-Agent", c.cfg.UserAgent)
	if c.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return nil, connError(c.cfg.BaseURL, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Error bodies are short; don't let a broken server feed us forever.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, statusError(resp.StatusCode, data, parseRetryAfter(resp.Header, time.Now()))
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType == "application/json" || !stream && mediaType != "text/event-stream" {
		// Complete, or a server that ignored stream: true.
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, &Error{Kind: KindTruncated, Message: "the response was cut off: " + err.Error(), Retryable: true, Err: err}
		}
		r, err := parseCompletion(data)
		if err == nil && onText != nil && r.Message.Content != "" {
			onText(r.Message.Content)
		}
		return r, err
	}
	return readStream(idleReader{r: resp.Body, watchdog: watchdog, idle: c.cfg.IdleTimeout}, onText)
}

// wireRequest is go-openai's request with the messages replaced: its
// ChatCompletionMessage drops empty content, and some servers reject a
// tool result without a content field.
type wireRequest struct {
	openai.ChatCompletionRequest
	Messages []wireMessage `json:"messages"` // shadows the embedded field
}

type wireMessage struct {
	Role       string            `json:"role"`
	Content    string            `json:"content"`
	ToolCalls  []openai.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
}

// emptySchema stands in for a tool without parameters: servers reject null.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func encodeRequest(req Request, stream bool) ([]byte, error) {
	w := wireRequest{ChatCompletionRequest: openai.ChatCompletionRequest{Model: req.Model, Stream: stream}}
	if stream {
		w.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	w.Messages = make([]wireMessage, 0, len(req.Messages))
	for _, m := range req.Messages {
		wm := wireMessage{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if args == "" {
				args = "{}" // servers that re-parse history choke on ""
			}
			wm.ToolCalls = append(wm.ToolCalls, openai.ToolCall{
				ID:       tc.ID,
				Type:     openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: tc.Name, Arguments: args},
			})
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
			params = emptySchema
		}
		w.Tools = append(w.Tools, openai.Tool{
			Type:     openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{Name: t.Name, Description: t.Description, Parameters: params},
		})
	}
	data, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode model request: %w", err)
	}
	return data, nil
}
