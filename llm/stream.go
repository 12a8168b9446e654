package llm

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// readStream parses a Chat Completions SSE stream into a Response,
// delivering content deltas to onText as they arrive. It is written by
// hand because real servers send keep-alive comments, error objects in
// several shapes, and lines larger than any fixed Scanner buffer.
func readStream(body io.Reader, onText func(string)) (*Response, error) {
	r := bufio.NewReaderSize(body, 64<<10)
	var a assembler
	for {
		// ReadString grows as needed: a whole-arguments chunk can be huge.
		line, err := r.ReadString('\n')
		if line != "" {
			done, lerr := a.line(line, onText)
			if lerr != nil {
				return nil, lerr
			}
			if done {
				a.done = true
				return a.response()
			}
		}
		if err == io.EOF {
			// Servers may omit [DONE]; then a finish_reason must have come.
			return a.response()
		}
		if err != nil {
			if a.finish != "" {
				// Everything but the trailer arrived.
				return a.response()
			}
			return nil, &Error{Kind: KindTruncated, Message: "the stream was cut off: " + err.Error(), Retryable: true, Err: err}
		}
	}
}

// assembler accumulates stream chunks into one assistant message.
type assembler struct {
	content   strings.Builder
	reasoning strings.Builder
	calls     []*callBuilder       // in order of appearance
	byIndex   map[int]*callBuilder // calls whose deltas carry an index
	finish    string
	usage     Usage
	answered  bool // a choice arrived
	done      bool // the stream ended with data: [DONE]
}

type callBuilder struct {
	id, name string
	args     strings.Builder
}

// line handles one SSE line. It reports done on "data: [DONE]".
func (a *assembler) line(line string, onText func(string)) (done bool, err error) {
	line = strings.TrimRight(line, "\r\n")
	var data string
	switch {
	case line == "" || line[0] == ':':
		// Event separators and comments, e.g. ": OPENROUTER PROCESSING".
		return false, nil
	case strings.HasPrefix(line, "data:"):
		data = strings.TrimSpace(line[len("data:"):])
	case line[0] == '{':
		// Some servers write a bare JSON error line mid-stream.
		data = line
	default:
		// event:, id:, retry: and anything else carry nothing we need.
		return false, nil
	}
	switch data {
	case "":
		return false, nil
	case "[DONE]":
		return true, nil
	}
	return false, a.chunk([]byte(data), onText)
}

// chunk applies one JSON chunk.
func (a *assembler) chunk(data []byte, onText func(string)) error {
	// Cheap pre-checks keep the extra decodes off the hot path.
	if bytes.Contains(data, []byte(`"error"`)) {
		if e := streamError(data); e != nil {
			return e
		}
	}
	// A field of an unexpected type is only a type error: the rest is
	// decoded, so go on.
	var c openai.ChatCompletionStreamResponse
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(data, &c); err != nil && !errors.As(err, &typeErr) {
		return &Error{Kind: KindStream, Message: "malformed chunk: " + clip(string(data)), Retryable: true, Err: err}
	}
	// go-openai knows neither Ollama's "reasoning" nor content sent as an
	// array of parts (Mistral), which fails its string field with a type
	// error: decode both ourselves when they may be there.
	var extra struct {
		Choices []struct {
			Delta struct {
				Content   json.RawMessage `json:"content"`
				Reasoning string          `json:"reasoning"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if typeErr != nil || bytes.Contains(data, []byte(`"reasoning"`)) {
		_ = json.Unmarshal(data, &extra)
	}

	// Usage may come on any chunk, even one with no choices; keep the
	// last non-zero value because some servers send it on every chunk.
	if u := c.Usage; u != nil && (u.PromptTokens != 0 || u.CompletionTokens != 0) {
		a.usage = Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	}
	for i, ch := range c.Choices {
		if ch.Index != 0 {
			continue // we never ask for n > 1
		}
		a.answered = true
		d := ch.Delta
		content, reasoning := d.Content, d.ReasoningContent
		if i < len(extra.Choices) {
			x := extra.Choices[i].Delta
			// Some servers fill both fields with the same text.
			if x.Reasoning != "" && x.Reasoning != reasoning {
				reasoning += x.Reasoning
			}
			if text, thinking, ok := contentParts(x.Content); ok {
				content = text
				reasoning += thinking
			}
		}
		if content != "" {
			a.content.WriteString(content)
			if onText != nil {
				onText(content)
			}
		}
		a.reasoning.WriteString(reasoning)
		for _, tc := range d.ToolCalls {
			a.toolDelta(tc)
		}
		if d.FunctionCall != nil {
			// The legacy function_call delta is a single index-less call.
			a.toolDelta(openai.ToolCall{Function: *d.FunctionCall})
		}
		if ch.FinishReason != "" {
			a.finish = string(ch.FinishReason)
		}
	}
	return nil
}

// toolDelta merges one tool-call delta. Deltas with an index are keyed by
// it (which also merges duplicate entries within one chunk). Without an
// index, a missing index is not 0: a new call starts when an id or name
// arrives that differs from the current call's, else the fragment belongs
// to the most recent call.
func (a *assembler) toolDelta(tc openai.ToolCall) {
	var cb *callBuilder
	if tc.Index != nil {
		cb = a.byIndex[*tc.Index]
		if cb == nil {
			cb = &callBuilder{}
			if a.byIndex == nil {
				a.byIndex = map[int]*callBuilder{}
			}
			a.byIndex[*tc.Index] = cb
			a.calls = append(a.calls, cb)
		}
	} else {
		if n := len(a.calls); n > 0 && !startsNewCall(a.calls[n-1], tc) {
			cb = a.calls[n-1]
		} else {
			cb = &callBuilder{}
			a.calls = append(a.calls, cb)
		}
	}
	// Keep the first non-empty id: servers repeat it, send "" or even a
	// new id on every chunk.
	if cb.id == "" {
		cb.id = tc.ID
	}
	if cb.name == "" {
		cb.name = tc.Function.Name
	}
	cb.args.WriteString(tc.Function.Arguments)
}

func startsNewCall(cur *callBuilder, tc openai.ToolCall) bool {
	return (tc.ID != "" && cur.id != "" && tc.ID != cur.id) ||
		(tc.Function.Name != "" && cur.name != "" && tc.Function.Name != cur.name)
}

// response finishes the message, or reports truncation.
func (a *assembler) response() (*Response, error) {
	finish := a.finish
	switch {
	case finish == "error":
		return nil, &Error{Kind: KindStream, Message: "the provider ended the stream with finish_reason \"error\"", Retryable: true}
	case finish != "":
	case !a.done:
		// Cut off: context overflow on some servers, or a dropped connection.
		return nil, &Error{Kind: KindTruncated, Message: "the stream ended without a finish_reason or [DONE] (context overflow or a dropped connection?)", Retryable: true}
	case !a.answered:
		// [DONE] alone is no reply; retry rather than return an empty one.
		return nil, &Error{Kind: KindTruncated, Message: "the stream ended with [DONE] but no finish_reason and no choices", Retryable: true}
	default:
		// [DONE] says the stream is complete: Snowflake Cortex and some
		// LiteLLM routes never send a finish_reason.
		finish = "stop"
	}
	calls := make([]ToolCall, 0, len(a.calls))
	for _, cb := range a.calls {
		if cb.name == "" && cb.args.Len() == 0 {
			continue // an empty placeholder delta
		}
		calls = append(calls, ToolCall{ID: cb.id, Name: cb.name, Arguments: cb.args.String()})
	}
	return assemble(a.content.String(), a.reasoning.String(), calls, finish, a.usage), nil
}

// contentPart is one element of content sent as an array.
type contentPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking json.RawMessage `json:"thinking"`
}

// contentParts reads content sent as an array of parts, as Mistral does:
// [{"type":"text","text":…}] is the answer, and {"type":"thinking",
// "thinking":[text parts]} is reasoning, never part of the answer. Other
// part types are ignored. ok is false when raw is not an array, e.g. the
// usual string, which go-openai has decoded already.
func contentParts(raw json.RawMessage) (text, thinking string, ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return "", "", false
	}
	var parts []contentPart
	_ = json.Unmarshal(raw, &parts) // a part of another shape is left empty
	var tb, rb strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text":
			tb.WriteString(p.Text)
		case "thinking":
			// Mistral nests text parts; accept a plain string too.
			var s string
			if json.Unmarshal(p.Thinking, &s) == nil {
				rb.WriteString(s)
			} else if t, _, ok := contentParts(p.Thinking); ok {
				rb.WriteString(t)
			}
		}
	}
	return tb.String(), rb.String(), true
}

// assemble builds a Response, synthesizing missing call ids and trusting
// the tool calls over the finish reason: some servers say "stop" after
// streaming calls. "length" is kept because arguments may be cut short.
func assemble(content, reasoning string, calls []ToolCall, finish string, usage Usage) *Response {
	if len(calls) == 0 {
		calls = nil
	}
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = newCallID()
		}
	}
	if len(calls) > 0 && finish != "length" {
		finish = "tool_calls"
	}
	return &Response{
		Message:      Message{Role: RoleAssistant, Content: content, ToolCalls: calls},
		FinishReason: finish,
		Usage:        usage,
		Reasoning:    reasoning,
	}
}

// newCallID makes an id for a call the server sent without one.
func newCallID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return "call_" + hex.EncodeToString(b[:])
}

// parseCompletion reads a non-streaming Chat Completions response.
func parseCompletion(data []byte) (*Response, error) {
	if e := streamError(data); e != nil {
		return nil, e
	}
	var c openai.ChatCompletionResponse
	if err := json.Unmarshal(data, &c); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return nil, &Error{Kind: KindStream, Message: "malformed response: " + clip(string(data)), Retryable: true, Err: err}
		}
	}
	var extra struct {
		Choices []struct {
			Message struct {
				Content   json.RawMessage `json:"content"`
				Reasoning string          `json:"reasoning"`
			} `json:"message"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(data, &extra)
	for i, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		m := ch.Message
		content, reasoning := m.Content, m.ReasoningContent
		if i < len(extra.Choices) {
			x := extra.Choices[i].Message
			if x.Reasoning != "" && x.Reasoning != reasoning {
				reasoning += x.Reasoning
			}
			// go-openai keeps array content in MultiContent; read the
			// parts ourselves so thinking stays out of the answer.
			if text, thinking, ok := contentParts(x.Content); ok {
				content = text
				reasoning += thinking
			}
		}
		var calls []ToolCall
		for _, tc := range m.ToolCalls {
			calls = append(calls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		if m.FunctionCall != nil {
			calls = append(calls, ToolCall{Name: m.FunctionCall.Name, Arguments: m.FunctionCall.Arguments})
		}
		// The whole body arrived, so a missing finish_reason means "stop".
		finish := string(ch.FinishReason)
		if finish == "" {
			finish = "stop"
		}
		usage := Usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens}
		return assemble(content, reasoning, calls, finish, usage), nil
	}
	return nil, &Error{Kind: KindStream, Message: "the response has no choices", Retryable: true}
}
