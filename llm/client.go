package llm

import (
	"bytes"
	"context"
	"encoding/base64"
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
	// IdleTimeout fails an attempt (retryably) when no data chunk comes
	// for this long, before or during the stream; default
	// DefaultIdleTimeout. Only a chunk carrying content, reasoning, a
	// tool-call delta, usage or a finish reason counts: SSE comments and
	// blank lines (keep-alives) do not, so a server or proxy that only
	// sends keep-alives cannot hold a call forever.
	IdleTimeout time.Duration
	// MaxStalls is how many attempts of a call may stall (IdleTimeout)
	// before it gives up; default DefaultMaxStalls. A provider that stalls
	// once is likely to stall again, so a stall is retried once, not
	// MaxAttempts times: a stalled provider ends the call within
	// MaxStalls × IdleTimeout and a few backoffs, not minutes later.
	MaxStalls int
	// CallTimeout bounds one Stream or Complete call, all its attempts and
	// the waits between them included; default DefaultCallTimeout. When
	// the next wait (backoff or a server's Retry-After) would pass it, the
	// call fails at once instead of sleeping.
	CallTimeout time.Duration
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

// Defaults for Config (and Setup) fields left zero. With them a stalled
// provider ends a call within about 4 minutes (two stalls of 2m, and the
// backoff between), and no call outlasts 5 minutes, whatever happens.
const (
	DefaultIdleTimeout = 2 * time.Minute
	DefaultCallTimeout = 5 * time.Minute
	DefaultMaxStalls   = 2
)

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
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxStalls <= 0 {
		cfg.MaxStalls = DefaultMaxStalls
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
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
	return c.retry(ctx, func(ctx context.Context) (*Response, error) {
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
	return c.retry(ctx, func(ctx context.Context) (*Response, error) {
		return c.attempt(ctx, body, false, nil)
	})
}

// retry runs try up to MaxAttempts times while it fails retryably (and
// at most MaxStalls attempts stall), all within CallTimeout: try gets a
// context that ends at the call's deadline, and a wait that would pass
// the deadline fails the call at once.
func (c *Client) retry(ctx context.Context, try func(context.Context) (*Response, error)) (*Response, error) {
	start := time.Now()
	callCtx, cancel := context.WithDeadlineCause(ctx, start.Add(c.cfg.CallTimeout), errCallTimeout)
	defer cancel()
	// waited sums the waits asked of Sleep. The time spent is the larger
	// of it and the clock's, so the deadline holds for an injected Sleep
	// that returns at once, too.
	var waited time.Duration
	stalls := 0
	for attempt := 1; ; attempt++ {
		resp, err := try(callCtx)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("model request: %w", ctx.Err())
		}
		if callCtx.Err() != nil {
			return nil, c.callTimedOut(attempt, err)
		}
		var e *Error
		if !errors.As(err, &e) {
			return nil, err
		}
		if e.Stalled {
			stalls++
		}
		if e.Stalled && stalls >= c.cfg.MaxStalls {
			out := *e
			out.Attempts = attempt
			out.Message = fmt.Sprintf("%s; the provider stalled %d times, so the call is not tried again", e.Message, stalls)
			return nil, &out
		}
		if !e.Retryable || attempt >= c.cfg.MaxAttempts {
			e.Attempts = attempt // only the final error says how many were made
			return nil, e
		}
		delay := c.backoff(attempt, e.RetryAfter)
		if left := c.cfg.CallTimeout - max(time.Since(start), waited); delay > left {
			return nil, c.waitTooLong(e, attempt, delay, max(left, 0))
		}
		waited += delay
		if c.cfg.OnRetry != nil {
			c.cfg.OnRetry(RetryInfo{Attempt: attempt, MaxAttempts: c.cfg.MaxAttempts, Delay: delay, Err: e, Status: e.Status})
		}
		if err := c.cfg.Sleep(callCtx, delay); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("model request: %w", ctx.Err())
			}
			if callCtx.Err() != nil {
				return nil, c.callTimedOut(attempt, e)
			}
			return nil, fmt.Errorf("model request: wait before retry: %w", err)
		}
	}
}

var errCallTimeout = errors.New("model call timeout")

// callTimedOut is the error of a call whose CallTimeout ran out during an
// attempt (or a wait); err is what the cut-off attempt returned.
func (c *Client) callTimedOut(attempts int, err error) *Error {
	return &Error{Kind: KindTimeout, Attempts: attempts, Err: err, Retryable: true,
		Message: fmt.Sprintf("no complete reply within %s, the longest a model call may take (--model-call-timeout); try again later", c.cfg.CallTimeout)}
}

// waitTooLong is the error of a call that gives up rather than wait delay
// before the next attempt, because only left remains of its CallTimeout.
// It keeps the kind, status and Retry-After of e, the last failure.
func (c *Client) waitTooLong(e *Error, attempts int, delay, left time.Duration) *Error {
	out := *e
	out.Attempts, out.WaitTooLong = attempts, true
	limit := fmt.Sprintf("longer than the call may take (%s)", c.cfg.CallTimeout)
	if delay <= c.cfg.CallTimeout {
		limit = fmt.Sprintf("longer than the %s left of the call's %s", left.Round(time.Millisecond), c.cfg.CallTimeout)
	}
	if e.RetryAfter > 0 && delay == e.RetryAfter {
		out.Message = fmt.Sprintf("the provider asks to wait %s (Retry-After), %s; try again later", delay, limit)
		if e.Message != "" {
			out.Message += " (server said: " + e.Message + ")"
		}
	} else {
		out.Message = fmt.Sprintf("the next retry would wait %s, %s", delay.Round(time.Millisecond), limit)
		if e.Message != "" {
			out.Message = e.Message + "; " + out.Message
		}
	}
	return &out
}

// attempt makes one HTTP request and reads the reply, streamed or not.
func (c *Client) attempt(ctx context.Context, body []byte, stream bool, onText func(string)) (*Response, error) {
	// A server that accepts the request and then goes silent, or sends only
	// keep-alives, would hang the run forever; the watchdog turns a lack of
	// data into a retryable error. Only progress pushes it back: a data
	// chunk that carries something, or bytes of a JSON body.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(c.cfg.IdleTimeout, func() { cancel(errIdle) })
	defer watchdog.Stop()
	progress := func() { watchdog.Reset(c.cfg.IdleTimeout) }
	resp, err := c.exchange(ctx, body, stream, onText, progress)
	if err != nil && errors.Is(context.Cause(ctx), errIdle) {
		return nil, &Error{Kind: KindTruncated, Retryable: true, Stalled: true, Err: err,
			Message: fmt.Sprintf("no data from the model for %s (--model-idle-timeout)", c.cfg.IdleTimeout)}
	}
	return resp, err
}

var errIdle = errors.New("model stream idle")

// idleReader reports progress on every read that returns data: every
// byte of a JSON body is part of the reply.
type idleReader struct {
	r        io.Reader
	progress func()
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.progress()
	}
	return n, err
}

func (c *Client) exchange(ctx context.Context, body []byte, stream bool, onText func(string), progress func()) (*Response, error) {
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
		data, err := readBody(idleReader{r: resp.Body, progress: progress}, defaultLimits)
		if err != nil {
			return nil, err
		}
		r, err := parseCompletion(data)
		if err == nil && onText != nil && r.Message.Content != "" {
			onText(r.Message.Content)
		}
		return r, err
	}
	return readStream(resp.Body, onText, progress, defaultLimits)
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
	Content    any               `json:"content"` // text, or []wirePart when the message has images
	ToolCalls  []openai.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
}

// wirePart is a part of a message's content: text or an image.
type wirePart struct {
	Type     string        `json:"type"` // "text" or "image_url"
	Text     string        `json:"text,omitempty"`
	ImageURL *wireImageURL `json:"image_url,omitempty"`
}

type wireImageURL struct {
	URL string `json:"url"` // data:MEDIA_TYPE;base64,DATA
}

// wireMessages are msgs as Chat Completions takes them. An image is a
// part of its message's content, after its About line. A tool result's
// images go in a user message after the results next to it, since the
// API takes image parts in user messages only: the result says so.
func wireMessages(msgs []Message) []wireMessage {
	out := make([]wireMessage, 0, len(msgs))
	var held []Image // tool results' images, until their results end
	for i, m := range msgs {
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
		switch {
		case len(m.Images) == 0:
		case m.Role == RoleTool:
			lines := []string{m.Content}
			for _, img := range m.Images {
				lines = append(lines, img.About+" (shown in the next message)")
			}
			wm.Content = strings.TrimLeft(strings.Join(lines, "\n"), "\n")
			held = append(held, m.Images...)
		default:
			wm.Content = imageParts(m.Content, m.Images)
		}
		out = append(out, wm)
		if len(held) > 0 && (i+1 == len(msgs) || msgs[i+1].Role != RoleTool) {
			out = append(out, wireMessage{Role: string(RoleUser), Content: imageParts("", held)})
			held = nil
		}
	}
	return out
}

// imageParts is text followed by each image, named by its About line.
func imageParts(text string, images []Image) []wirePart {
	var parts []wirePart
	if text != "" {
		parts = append(parts, wirePart{Type: "text", Text: text})
	}
	for _, img := range images {
		url := "data:" + img.MediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
		parts = append(parts, wirePart{Type: "text", Text: img.About}, wirePart{Type: "image_url", ImageURL: &wireImageURL{URL: url}})
	}
	return parts
}

// emptySchema stands in for a tool without parameters: servers reject null.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func encodeRequest(req Request, stream bool) ([]byte, error) {
	w := wireRequest{ChatCompletionRequest: openai.ChatCompletionRequest{Model: req.Model, Stream: stream}}
	if stream {
		w.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	w.Messages = wireMessages(req.Messages)
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
	if f := req.ResponseFormat; f != nil {
		w.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: f.Name, Schema: f.Schema, Strict: f.Strict},
		}
	}
	data, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode model request: %w", err)
	}
	return data, nil
}
