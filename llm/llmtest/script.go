// Package llmtest is a scripted fake OpenAI-compatible Chat Completions
// server. Each request gets the next Turn of a Script, streamed like a
// real server would, optionally with the quirks of real servers (the
// Quirk constants, numbered as in the design notes' PROVIDERS.md), HTTP
// errors, delays or hangs. It records every request so tests can assert
// what the client sent.
//
// In Go:
//
//	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
//		{ToolCalls: []llmtest.Call{{Name: "read_file", Arguments: json.RawMessage(`{"path":"a.txt"}`)}}},
//		{Text: "done", Quirks: []string{llmtest.QuirkKeepalive}},
//	}})
//	// point the client at srv.URL(), run, then inspect srv.Requests()
//
// As a file (LoadScript, and the fakemodel command):
//
//	{
//	  "loop": false,
//	  "log_path": "requests.jsonl",
//	  "turns": [
//	    {"status": 429, "headers": {"Retry-After": "1"}},
//	    {"text": "Let me look.", "reasoning": "the user wants a file",
//	     "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
//	     "quirks": ["no_index", "split_args"]},
//	    {"text": "It says hello.", "usage": {"prompt_tokens": 50, "completion_tokens": 4},
//	     "chunk_delay_ms": 20}
//	  ]
//	}
//
// A bare array of turns is accepted too. Turns are served strictly in
// arrival order; an error turn consumes its turn, so a client's retry
// gets the next one. Past the last turn (without loop) every request gets
// HTTP 500 "llmtest: script exhausted after N turns".
//
// It speaks only JSON over HTTP and does not import package llm.
package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Script is what the server answers, one Turn per request, in order.
type Script struct {
	Turns []Turn `json:"turns"`
	// Loop serves the turns again from the start when they run out
	// (benchmarks). Without it, extra requests get HTTP 500.
	Loop bool `json:"loop,omitempty"`
	// LogPath, if set, gets every request body appended as one JSON line.
	LogPath string `json:"log_path,omitempty"`
	// ContextWindow, if set, refuses a request of more prompt tokens (the
	// server counts a token per 4 bytes of body, as its usage does), as a
	// server refuses a prompt past its context window: HTTP 400 with
	// OpenAI's context_length_exceeded error stating the window and the
	// request's tokens (ContextError picks another server's wording). The
	// request takes no turn. MaxRequestBytes does the same for a body of
	// more bytes; its window is a quarter of them.
	ContextWindow   int    `json:"context_window,omitempty"`
	MaxRequestBytes int    `json:"max_request_bytes,omitempty"`
	ContextError    string `json:"context_error,omitempty"` // openai (default), vllm, llamacpp, ollama, openrouter
	// Standing turns answer every request whose messages contain their
	// When, again and again, without taking a turn of Turns: e.g. the
	// agent's compaction requests in a long scripted run.
	Standing []Turn `json:"standing,omitempty"`
}

// contextErrors are real servers' answers to a prompt past the context
// window, by ContextError; contextError fills in the numbers.
var contextErrors = map[string]string{
	"openai":     `{"error":{"message":"This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
	"vllm":       `{"object":"error","message":"This model's maximum context length is {window} tokens. However, you requested {tokens} tokens ({tokens} in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`,
	"llamacpp":   `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":{tokens},"n_ctx":{window}}}`,
	"ollama":     `{"error":{"message":"prompt too long; exceeded max context length by {excess} tokens","type":"api_error","param":null,"code":null}}`,
	"openrouter": `{"error":{"message":"This endpoint's maximum context length is {window} tokens. However, you requested about {tokens} tokens ({tokens} of text input, 0 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}}`,
}

// ContextErrors lists the wordings ContextError may pick.
func ContextErrors() []string {
	names := make([]string, 0, len(contextErrors))
	for name := range contextErrors {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// contextError is the refusal of a request of tokens past window, in the
// wording of server (OpenAI's by default).
func contextError(server string, window, tokens int) string {
	msg, ok := contextErrors[server]
	if !ok {
		msg = contextErrors["openai"]
	}
	return strings.NewReplacer("{window}", strconv.Itoa(window), "{tokens}", strconv.Itoa(tokens),
		"{excess}", strconv.Itoa(tokens-window)).Replace(msg)
}

// tooLong reports whether a request body is past the script's window,
// and the window and the body's tokens.
func (s Script) tooLong(body []byte) (window, tokens int, refused bool) {
	tokens = promptTokens(body)
	switch {
	case s.ContextWindow > 0 && tokens > s.ContextWindow:
		return s.ContextWindow, tokens, true
	case s.MaxRequestBytes > 0 && len(body) > s.MaxRequestBytes:
		return s.MaxRequestBytes / 4, tokens, true
	}
	return 0, tokens, false
}

// promptTokens is how many tokens the server counts in a request body:
// one per 4 bytes, as in the usage it reports.
func promptTokens(body []byte) int { return max(1, len(body)/4) }

// Turn is one scripted reply. With Status or Body set it is a raw HTTP
// response; otherwise an SSE stream (or a JSON body when the request has
// "stream": false).
type Turn struct {
	Text      string `json:"text,omitempty"`      // assistant content, streamed in a few chunks
	Reasoning string `json:"reasoning,omitempty"` // sent as reasoning_content (or reasoning, see quirks)
	ToolCalls []Call `json:"tool_calls,omitempty"`
	Usage     *Usage `json:"usage,omitempty"` // default: estimated from the sizes of request and reply
	// FinishReason overrides the default "stop" / "tool_calls".
	FinishReason string `json:"finish_reason,omitempty"`

	Status  int               `json:"status,omitempty"`  // HTTP status of a raw response (default 200 when Body is set)
	Body    string            `json:"body,omitempty"`    // raw response body, sent verbatim
	Headers map[string]string `json:"headers,omitempty"` // extra response headers, e.g. Retry-After

	DelayMS      int  `json:"delay_ms,omitempty"`       // wait before responding
	ChunkDelayMS int  `json:"chunk_delay_ms,omitempty"` // wait between SSE events
	Hang         bool `json:"hang,omitempty"`           // send the first content chunk, then block until the client leaves
	// KeepaliveMS, on a streamed turn, sends the headers at once and then
	// an SSE comment ": keep-alive" (and a blank line) every this many
	// milliseconds whenever the stream waits: through DelayMS, between
	// chunks and during a Hang, as OpenRouter and proxies do while a model
	// thinks. With Hang the stream is only keep-alives after the first
	// chunks; with a long DelayMS it is only keep-alives from the start.
	KeepaliveMS int `json:"keepalive_ms,omitempty"`
	// Gate, when not nil, holds the reply (before DelayMS) until it is
	// closed: a test acts while the model "thinks" (kills the agent, looks
	// at the screen) however long a loaded machine takes, then lets it
	// answer. For Go tests; a script file cannot set it.
	Gate <-chan struct{} `json:"-"`

	Quirks []string `json:"quirks,omitempty"` // see the Quirk constants

	// When routes the turn: it is served to a request whose messages
	// contain this text, taking turns in script order among the ones that
	// match. Tests of parallel phases use it to answer each phase from its
	// own turns. Once any turn has When, every turn is routed this way
	// (a turn without When matches any request).
	When string `json:"when,omitempty"`
}

// Call is one scripted tool call.
type Call struct {
	ID   string `json:"id,omitempty"` // default "call_<request>_<n>", unique per server
	Name string `json:"name"`
	// Arguments is a JSON object, sent compacted as the arguments string.
	// A JSON string is sent as its contents.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// RawArguments, if set, is sent verbatim instead (invalid-JSON tests).
	RawArguments string `json:"raw_arguments,omitempty"`
}

// Usage is the token usage reported for a turn.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Quirks reproduce the behaviour of real servers (PROVIDERS.md #n).
const (
	QuirkNoIndex            = "no_index"               // #1 tool-call deltas without index
	QuirkSplitArgs          = "split_args"             // #2 arguments one character per chunk
	QuirkWholeArgs          = "whole_args"             // #2 arguments whole, in the first chunk
	QuirkArgsInFirstChunk   = "args_in_first_chunk"    // #4 first chunk carries `{"…` rather than ""
	QuirkIDFirstOnly        = "id_first_only"          // #3 id only in a call's first delta (the default)
	QuirkIDRepeated         = "id_repeated"            // #3 the same id in every delta (vLLM)
	QuirkIDNewEachChunk     = "id_new_each_chunk"      // #3 a different id in every delta (OCI via LiteLLM)
	QuirkIDEmpty            = "id_empty"               // #3 "id": "" in every delta (LM Studio)
	QuirkDuplicateIndex     = "duplicate_index"        // #5 two entries with the same index in one chunk
	QuirkFinishStopWithTool = "finish_stop_with_tools" // #6 finish_reason "stop" after tool calls
	QuirkNoFinishReason     = "no_finish_reason"       // #7 no finish_reason at all, but a complete stream ending with [DONE] (Snowflake Cortex)
	QuirkCutOff             = "cut_off"                // #7 the body ends after some content with neither finish_reason nor [DONE] (context overflow)
	QuirkUsageEmptyChoices  = "usage_empty_choices"    // #8 usage in a final chunk with "choices": []
	QuirkUsageEveryChunk    = "usage_every_chunk"      // #9 usage on every chunk, growing
	QuirkKeepalive          = "keepalive"              // #10 ": OPENROUTER PROCESSING" and blank lines
	QuirkEventLines         = "event_lines"            // "event: message" before each data line
	QuirkErrorOpenRouter    = "error_openrouter"       // #11 data: {"error":{"code":502,…}} after some content
	QuirkErrorVLLM          = "error_vllm"             // #11 data: {"object":"error",…,"code":500} after some content
	QuirkReasoningField     = "reasoning_field"        // #12 reasoning in "reasoning" (Ollama)
	QuirkReasoningContent   = "reasoning_content"      // #12 reasoning in "reasoning_content" (the default)
	QuirkJinja500           = "jinja_500"              // #13 HTTP 500 "tools param requires --jinja flag"
	QuirkDisconnect         = "disconnect"             // close the connection mid-stream, no [DONE]
	QuirkContentParts       = "content_parts"          // #16 content as [{"type":"text"}] parts, reasoning as {"type":"thinking"} parts (Mistral)
)

var knownQuirks = []string{
	QuirkNoIndex, QuirkSplitArgs, QuirkWholeArgs, QuirkArgsInFirstChunk,
	QuirkIDFirstOnly, QuirkIDRepeated, QuirkIDNewEachChunk, QuirkIDEmpty,
	QuirkDuplicateIndex, QuirkFinishStopWithTool, QuirkNoFinishReason, QuirkCutOff,
	QuirkUsageEmptyChoices, QuirkUsageEveryChunk, QuirkKeepalive, QuirkEventLines,
	QuirkErrorOpenRouter, QuirkErrorVLLM, QuirkReasoningField, QuirkReasoningContent,
	QuirkJinja500, QuirkDisconnect, QuirkContentParts,
}

// routed reports whether turns are matched to requests by When rather
// than served in arrival order.
func (s Script) routed() bool {
	for _, t := range s.Turns {
		if t.When != "" {
			return true
		}
	}
	return false
}

// LoadScript reads a script file (see ParseScript).
func LoadScript(path string) (Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Script{}, fmt.Errorf("load script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return Script{}, fmt.Errorf("load script %s: %w", path, err)
	}
	return s, nil
}

// ParseScript decodes a script: an object {"turns":[…],"loop":…} or just
// an array of turns. Unknown fields and quirks are errors, so typos fail
// loudly instead of silently testing nothing.
func ParseScript(data []byte) (Script, error) {
	var s Script
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var err error
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		err = dec.Decode(&s.Turns)
	} else {
		err = dec.Decode(&s)
	}
	if err != nil {
		return Script{}, fmt.Errorf("parse script: %w", err)
	}
	if err := s.validate(); err != nil {
		return Script{}, err
	}
	return s, nil
}

func (s Script) validate() error {
	for i, t := range s.Turns {
		for _, q := range t.Quirks {
			if !slices.Contains(knownQuirks, q) {
				return fmt.Errorf("turn %d: unknown quirk %q (known: %s)", i+1, q, strings.Join(knownQuirks, ", "))
			}
		}
		if t.Status != 0 && (t.Status < 100 || t.Status > 599) {
			return fmt.Errorf("turn %d: status %d is not an HTTP status", i+1, t.Status)
		}
		if t.DelayMS < 0 || t.ChunkDelayMS < 0 || t.KeepaliveMS < 0 {
			return fmt.Errorf("turn %d: negative delay", i+1)
		}
	}
	if _, ok := contextErrors[s.ContextError]; s.ContextError != "" && !ok {
		return fmt.Errorf("unknown context_error %q (known: %s)", s.ContextError, strings.Join(ContextErrors(), ", "))
	}
	return nil
}

func (t Turn) has(quirk string) bool { return slices.Contains(t.Quirks, quirk) }

// arguments is the string the server sends for c's arguments.
func (c Call) arguments() string {
	if c.RawArguments != "" {
		return c.RawArguments
	}
	a := bytes.TrimSpace(c.Arguments)
	if len(a) == 0 {
		return "{}"
	}
	if a[0] == '"' {
		var s string
		if json.Unmarshal(a, &s) == nil {
			return s
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, a) == nil {
		return buf.String()
	}
	return string(a)
}
