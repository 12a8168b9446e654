package llmtest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// RecordedRequest is one request the server received.
type RecordedRequest struct {
	Path   string
	Header http.Header
	Body   []byte    // the raw JSON body
	Turn   int       // index into Script.Turns that answered it; -1 if none
	At     time.Time // when its body had arrived
	// TooLong says the server refused it as past its context window
	// (Script.ContextWindow, MaxRequestBytes).
	TooLong bool
	parsed  wireRequest
}

// Message is a request message, flattened for assertions.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"` // text parts of array content are joined
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Images     []string   `json:"images,omitempty"` // the URLs of image_url parts (data: URLs)
}

// ToolCall is a tool call inside a request message.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// wireRequest is the part of a request body the helpers read.
type wireRequest struct {
	Model    string        `json:"model"`
	Stream   *bool         `json:"stream"`
	Messages []wireMessage `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

type wireMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

// Model is the requested model name.
func (r RecordedRequest) Model() string { return r.parsed.Model }

// Stream reports whether the request asked for a stream.
func (r RecordedRequest) Stream() bool { return r.parsed.Stream != nil && *r.parsed.Stream }

// Messages returns the request's messages.
func (r RecordedRequest) Messages() []Message {
	out := make([]Message, 0, len(r.parsed.Messages))
	for _, wm := range r.parsed.Messages {
		m := Message{Role: wm.Role, Content: contentText(wm.Content), ToolCallID: wm.ToolCallID, Images: imageURLs(wm.Content)}
		for _, tc := range wm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		out = append(out, m)
	}
	return out
}

// Images returns the URLs of the request's image parts (data: URLs), in
// the order of its messages.
func (r RecordedRequest) Images() []string {
	var out []string
	for _, m := range r.Messages() {
		out = append(out, m.Images...)
	}
	return out
}

// LastMessage returns the final message, or a zero Message if none.
func (r RecordedRequest) LastMessage() Message {
	ms := r.Messages()
	if len(ms) == 0 {
		return Message{}
	}
	return ms[len(ms)-1]
}

// ToolNames returns the names of the tools offered to the model.
func (r RecordedRequest) ToolNames() []string {
	var out []string
	for _, t := range r.parsed.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

// Decode unmarshals the raw body into v, for fields the helpers skip.
func (r RecordedRequest) Decode(v any) error { return json.Unmarshal(r.Body, v) }

// imageURLs are the URLs of the image_url parts of array content.
func imageURLs(raw json.RawMessage) []string {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var out []string
	for _, p := range parts {
		if p.Type == "image_url" {
			out = append(out, p.ImageURL.URL)
		}
	}
	return out
}

// contentText reads content that is a string, null, or an array of parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}
