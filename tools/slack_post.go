package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

const (
	slackDefaultAPI = "https://slack.com/api"
	slackTimeout    = 30 * time.Second
)

var slackPostDef = Definition{
	Name: "slack_post",
	Description: `Post a message to a Slack channel with chat.postMessage. This really posts: use it only when the task asks for it.

Each call posts at most once per channel and text in this phase: calling again with the same channel and text does not post a second time, it returns the receipt of the earlier post.

If the result says the outcome is unknown, or that an identical earlier post has an unknown outcome, the message may or may not have been posted: do not post it again by other means (bash, another tool, reworded text); say so in your answer instead.`,
	Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "channel": {"type": "string", "description": "Channel ID (C0123ABCD) or name (#general)."},
    "text": {"type": "string", "description": "The message text (Slack mrkdwn)."}
  },
  "required": ["channel", "text"],
  "additionalProperties": false
}`),
}

// slackPost is slack_post's performer.
type slackPost struct {
	url    string // the chat.postMessage endpoint
	token  string
	client *http.Client
	cfgErr error
}

// slackReceipt is the details of a slack_message_sent receipt.
type slackReceipt struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

func newSlackPost(getenv func(string) string, o EffectOptions) *slackPost {
	api := strings.TrimRight(strings.TrimSpace(getenv("AGENT_SLACK_API_URL")), "/")
	if api == "" {
		api = slackDefaultAPI
	}
	t := &slackPost{url: api + "/chat.postMessage", token: strings.TrimSpace(getenv("AGENT_SLACK_TOKEN"))}
	if t.token == "" {
		t.cfgErr = errors.New("slack_post is not configured: set AGENT_SLACK_TOKEN (a Slack bot token with chat:write)")
	}
	t.client = &http.Client{}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		t.client = &c
	}
	if t.client.Timeout == 0 {
		t.client.Timeout = slackTimeout
	}
	// A redirect would turn the POST into a GET; report it instead.
	t.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return t
}

func (t *slackPost) prepare(args json.RawMessage) (Perform, error) {
	var a struct {
		Channel string `json:"channel"`
		Text    string `json:"text"`
	}
	if err := decodeArgs(slackPostDef, args, &a); err != nil {
		return nil, err
	}
	channel := strings.TrimSpace(a.Channel)
	if channel == "" {
		return nil, errors.New("channel is empty")
	}
	if strings.TrimSpace(a.Text) == "" {
		return nil, errors.New("text is empty")
	}
	if t.cfgErr != nil {
		return nil, t.cfgErr
	}
	return func(ctx context.Context, _ string) (Sent, error) {
		r, err := t.post(ctx, channel, a.Text)
		if err != nil {
			return Sent{}, err
		}
		return Sent{Summary: fmt.Sprintf("message posted to %s (ts %s)", r.Channel, r.TS), Details: r}, nil
	}, nil
}

// post calls chat.postMessage. Until the whole request is written Slack
// cannot have acted on it, so earlier failures are certainly-not-sent; after
// that only an explicit refusal is.
func (t *slackPost) post(ctx context.Context, channel, text string) (slackReceipt, error) {
	body, _ := json.Marshal(struct {
		Channel string `json:"channel"`
		Text    string `json:"text"`
	}{channel, text})
	var written atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			written.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return slackReceipt{}, NotSent(fmt.Errorf("slack request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+t.token)

	resp, err := t.client.Do(req)
	if err != nil {
		if written.Load() {
			return slackReceipt{}, fmt.Errorf("no response from Slack after the request was sent: %w", err)
		}
		return slackReceipt{}, NotSent(fmt.Errorf("post to Slack: %w", err))
	}
	defer resp.Body.Close()
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))

	var r struct {
		OK      bool   `json:"ok"`
		Error   string `json:"error"`
		Channel string `json:"channel"`
		TS      string `json:"ts"`
	}
	jsonErr := json.Unmarshal(raw, &r)
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests:
		wait := "no Retry-After given"
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			wait = "Retry-After: " + ra + " seconds"
		}
		return slackReceipt{}, NotSent(fmt.Errorf("rate limited by Slack (HTTP 429, %s); try again later", wait))
	case code >= 500:
		return slackReceipt{}, fmt.Errorf("the Slack API answered HTTP %d", code)
	case code >= 300: // 3xx and 4xx: the request was refused, not processed
		reason := r.Error
		if jsonErr != nil || reason == "" {
			reason = snippet(raw)
		}
		return slackReceipt{}, NotSent(fmt.Errorf("the Slack API refused the request: HTTP %d: %s", code, reason))
	case readErr != nil:
		return slackReceipt{}, fmt.Errorf("read Slack's answer (HTTP %d): %w", code, readErr)
	case jsonErr != nil:
		return slackReceipt{}, fmt.Errorf("unreadable answer from Slack (HTTP %d): %s", code, snippet(raw))
	case !r.OK:
		return slackReceipt{}, NotSent(fmt.Errorf("the Slack API refused the message: %s", orUnknown(r.Error)))
	}
	if r.Channel == "" {
		r.Channel = channel
	}
	return slackReceipt{Channel: r.Channel, TS: r.TS}, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// snippet is the start of a response body, for error messages.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
