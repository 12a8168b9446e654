package llm

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// limits bounds what reading one reply may hold in memory, so a broken
// or hostile server cannot take the process down with one endless line.
type limits struct {
	line     int // one SSE line with its terminator, or a whole JSON body
	response int // content, reasoning and tool arguments of a stream together
}

// defaultLimits are far above any real reply: a whole-arguments chunk
// of a large file write is a few MiB at most.
var defaultLimits = limits{line: 16 << 20, response: 64 << 20}

// tooLarge is the error for a reply over a limit: not retryable, as the
// same request would likely get the same reply.
func tooLarge(what string, limit int) *Error {
	return &Error{Kind: KindStream, Message: fmt.Sprintf("%s of more than %s refused", what, byteSize(limit))}
}

// byteSize writes n bytes in the largest binary unit that divides it.
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// readBody reads a whole non-streaming body of at most lim.line bytes.
func readBody(body io.Reader, lim limits) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(body, int64(lim.line)+1))
	if err != nil {
		return nil, &Error{Kind: KindTruncated, Message: "the response was cut off: " + err.Error(), Retryable: true, Err: err}
	}
	if len(data) > lim.line {
		return nil, tooLarge("model response", lim.line)
	}
	return data, nil
}

// readStream parses a Chat Completions SSE stream into a Response,
// delivering content deltas to onText as they arrive and calling
// progress (if not nil) after each data chunk that carries part of the
// reply; comments, blank lines and empty chunks are no progress. It is
// written by hand because real servers send keep-alive comments, error
// objects in several shapes, and lines larger than any fixed Scanner
// buffer; lim bounds the lines and the reply.
func readStream(body io.Reader, onText func(string), progress func(), lim limits) (*Response, error) {
	r := bufio.NewReaderSize(body, 64<<10)
	a := assembler{limit: lim.response}
	var long []byte // a line longer than r's buffer, so far
	for {
		// Lines that fit the buffer are used in place; longer ones (a
		// whole-arguments chunk can be large) are gathered up to the limit.
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull || long != nil {
			if len(long)+len(line) > lim.line {
				return nil, tooLarge("model response line", lim.line)
			}
			long = append(long, line...)
			if err == bufio.ErrBufferFull {
				continue
			}
			line, long = long, nil
		}
		if len(line) > lim.line {
			return nil, tooLarge("model response line", lim.line)
		}
		if len(line) > 0 {
			done, progressed, lerr := a.line(line, onText)
			if lerr != nil {
				return nil, lerr
			}
			if progressed && progress != nil {
				progress()
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
	size      int  // bytes of content, reasoning and arguments so far
	limit     int  // the most size may reach; 0 for no limit
}

type callBuilder struct {
	id, name string
	args     strings.Builder
}

// line handles one SSE line. It reports done on "data: [DONE]", and
// progressed when the line was a chunk carrying part of the reply. It
// keeps no reference to line.
func (a *assembler) line(line []byte, onText func(string)) (done, progressed bool, err error) {
	line = bytes.TrimRight(line, "\r\n")
	var data []byte
	switch {
	case len(line) == 0 || line[0] == ':':
		// Event separators and comments, e.g. ": OPENROUTER PROCESSING".
		return false, false, nil
	case bytes.HasPrefix(line, []byte("data:")):
		data = bytes.TrimSpace(line[len("data:"):])
	case line[0] == '{':
		// Some servers write a bare JSON error line mid-stream.
		data = line
	default:
		// event:, id:, retry: and anything else carry nothing we need.
		return false, false, nil
	}
	switch string(data) {
	case "":
		return false, false, nil
	case "[DONE]":
		return true, false, nil
	}
	progressed, err = a.chunk(data, onText)
	return false, progressed, err
}

// chunk applies one JSON chunk. It reports progressed when the chunk
// carried content, reasoning, a tool-call delta, usage or a finish reason:
// a chunk with only a role, or nothing at all, is no sign of life.
func (a *assembler) chunk(data []byte, onText func(string)) (progressed bool, err error) {
	// Cheap pre-checks keep the extra decodes off the hot path.
	if bytes.Contains(data, []byte(`"error"`)) {
		if e := streamError(data); e != nil {
			return false, e
		}
	}
	// A field of an unexpected type is only a type error: the rest is
	// decoded, so go on.
	var c openai.ChatCompletionStreamResponse
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(data, &c); err != nil && !errors.As(err, &typeErr) {
		return false, &Error{Kind: KindStream, Message: "malformed chunk: " + clip(string(data)), Retryable: true, Err: err}
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
		progressed = true
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
		// Check the size before keeping anything of this chunk.
		size := len(content) + len(reasoning)
		for _, tc := range d.ToolCalls {
			size += len(tc.Function.Arguments)
		}
		if d.FunctionCall != nil {
			size += len(d.FunctionCall.Arguments)
		}
		if a.size += size; a.limit > 0 && a.size > a.limit {
			return false, tooLarge("model response", a.limit)
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
		if content != "" || reasoning != "" || len(d.ToolCalls) > 0 || d.FunctionCall != nil || ch.FinishReason != "" {
			progressed = true
		}
	}
	return progressed, nil
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
