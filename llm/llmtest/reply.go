package llmtest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Wire shapes of a streamed chunk. Pointers mark fields whose presence
// matters: "id": "" differs from no id, "choices": [] from no choices.
type chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

type choice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role             string      `json:"role,omitempty"`
	Content          any         `json:"content,omitempty"` // *string, or []part with QuirkContentParts
	Reasoning        string      `json:"reasoning,omitempty"`
	ReasoningContent string      `json:"reasoning_content,omitempty"`
	ToolCalls        []toolDelta `json:"tool_calls,omitempty"`
}

// part is an element of content sent as an array (Mistral).
type part struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	Thinking []part `json:"thinking,omitempty"`
}

// textParts and thinkingParts are the array forms of content and reasoning.
func textParts(s string) []part { return []part{{Type: "text", Text: s}} }

func thinkingParts(s string) []part {
	return []part{{Type: "thinking", Thinking: textParts(s)}}
}

type toolDelta struct {
	Index    *int    `json:"index,omitempty"`
	ID       *string `json:"id,omitempty"`
	Type     string  `json:"type,omitempty"`
	Function fnDelta `json:"function"`
}

type fnDelta struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

// ending says how a stream stops.
type ending int

const (
	endDone       ending = iota // finish, usage, data: [DONE]
	endError                    // an error object after some content
	endDisconnect               // the connection drops mid-stream
	endCutOff                   // the body ends cleanly mid-reply, without [DONE]
	endHang                     // block after some content
)

// plan is a stream ready to write.
type plan struct {
	chunks []string // JSON chunks in order
	ending ending
	cutAt  int    // for endings other than endDone: chunks sent before it
	errObj string // for endError
}

// streamPlan builds the chunks of turn t, the seq-th request of the server.
func streamPlan(t Turn, seq int, model string, usage Usage) plan {
	id := "chatcmpl-llmtest-" + strconv.Itoa(seq)
	created := time.Now().Unix()
	var chunks []chunk
	add := func(d delta, finish *string) {
		chunks = append(chunks, chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
			Choices: []choice{{Index: 0, Delta: d, FinishReason: finish}}})
	}

	add(delta{Role: "assistant"}, nil)
	for _, p := range pieces(t.Reasoning, defaultSize(t.Reasoning)) {
		switch {
		case t.has(QuirkContentParts):
			add(delta{Content: thinkingParts(p)}, nil)
		case t.has(QuirkReasoningField):
			add(delta{Reasoning: p}, nil)
		default:
			add(delta{ReasoningContent: p}, nil)
		}
	}
	for _, p := range pieces(t.Text, defaultSize(t.Text)) {
		if t.has(QuirkContentParts) {
			add(delta{Content: textParts(p)}, nil)
		} else {
			add(delta{Content: &p}, nil)
		}
	}
	for i, c := range t.ToolCalls {
		for _, tds := range callDeltas(t, c, i, seq) {
			add(delta{ToolCalls: tds}, nil)
		}
	}

	// finishAt is how many chunks can go out without finishing the reply.
	finishAt := len(chunks)
	if !t.has(QuirkNoFinishReason) {
		finish := finishReason(t)
		add(delta{}, &finish)
		if !t.has(QuirkUsageEmptyChoices) {
			chunks[len(chunks)-1].Usage = &usage
		}
	}
	if t.has(QuirkNoFinishReason) || t.has(QuirkUsageEmptyChoices) {
		chunks = append(chunks, chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
			Choices: []choice{}, Usage: &usage})
	}
	if t.has(QuirkUsageEveryChunk) {
		// Growing partial counts; only the last one is the total.
		for i := range chunks {
			if chunks[i].Usage == nil {
				chunks[i].Usage = &Usage{PromptTokens: usage.PromptTokens, CompletionTokens: min(i+1, usage.CompletionTokens)}
			}
		}
	}

	p := plan{ending: endDone}
	for _, c := range chunks {
		data, _ := json.Marshal(c) // plain structs: cannot fail
		p.chunks = append(p.chunks, string(data))
	}
	// Stop after the role chunk and the first content chunk, never
	// after the finish.
	someContent := min(2, finishAt)
	switch {
	case t.has(QuirkErrorOpenRouter):
		p.ending, p.cutAt = endError, someContent
		p.errObj = `{"error":{"code":502,"message":"upstream"}}`
	case t.has(QuirkErrorVLLM):
		p.ending, p.cutAt = endError, someContent
		p.errObj = `{"object":"error","message":"llmtest: scripted vllm error","type":"InternalServerError","param":null,"code":500}`
	case t.has(QuirkCutOff):
		p.ending, p.cutAt = endCutOff, someContent
	case t.has(QuirkDisconnect):
		p.ending, p.cutAt = endDisconnect, min(max(2, len(chunks)/2), finishAt)
	case t.Hang:
		p.ending, p.cutAt = endHang, someContent
	}
	return p
}

func finishReason(t Turn) string {
	switch {
	case t.FinishReason != "":
		return t.FinishReason
	case len(t.ToolCalls) > 0 && !t.has(QuirkFinishStopWithTool):
		return "tool_calls"
	}
	return "stop"
}

// callID is the id of call i of the seq-th request.
func callID(c Call, seq, i int) string {
	if c.ID != "" {
		return c.ID
	}
	return fmt.Sprintf("call_%d_%d", seq, i+1)
}

// callDeltas returns the tool_calls arrays of the chunks for call i:
// a header (index, id, type, name) and then argument fragments.
func callDeltas(t Turn, c Call, i, seq int) [][]toolDelta {
	id := callID(c, seq, i)
	args := c.arguments()

	var headerArgs string
	var frags []string
	switch {
	case t.has(QuirkWholeArgs) && !t.has(QuirkDuplicateIndex):
		headerArgs = args
	case t.has(QuirkWholeArgs):
		frags = []string{args} // merged into the header chunk below
	case t.has(QuirkSplitArgs):
		frags = pieces(args, 1)
	default:
		frags = pieces(args, defaultSize(args))
	}
	if t.has(QuirkArgsInFirstChunk) && len(frags) > 0 {
		headerArgs, frags = frags[0], frags[1:]
	}

	idFor := func(k int) *string { // k = 0 for the header
		switch {
		case t.has(QuirkIDEmpty):
			return ptr("")
		case t.has(QuirkIDRepeated):
			return ptr(id)
		case t.has(QuirkIDNewEachChunk) && k > 0:
			return ptr(fmt.Sprintf("%s_%d", id, k))
		case k == 0:
			return ptr(id)
		}
		return nil
	}
	index := func() *int {
		if t.has(QuirkNoIndex) {
			return nil
		}
		return ptr(i)
	}

	out := [][]toolDelta{{{Index: index(), ID: idFor(0), Type: "function",
		Function: fnDelta{Name: c.Name, Arguments: ptr(headerArgs)}}}}
	for k, f := range frags {
		out = append(out, []toolDelta{{Index: index(), ID: idFor(k + 1), Function: fnDelta{Arguments: ptr(f)}}})
	}
	if t.has(QuirkDuplicateIndex) && len(out) > 1 {
		// The header and the first fragment share one chunk.
		out[0] = append(out[0], out[1]...)
		out = append(out[:1], out[2:]...)
	}
	return out
}

// completion is the non-streaming reply to a "stream": false request.
func completion(t Turn, seq int, model string, usage Usage) []byte {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type message struct {
		Role             string `json:"role"`
		Content          any    `json:"content"` // null, a string or []part
		Reasoning        string `json:"reasoning,omitempty"`
		ReasoningContent string `json:"reasoning_content,omitempty"`
		ToolCalls        []call `json:"tool_calls,omitempty"`
	}
	m := message{Role: "assistant"}
	switch {
	case t.has(QuirkContentParts) && (t.Text != "" || t.Reasoning != ""):
		var parts []part
		if t.Reasoning != "" {
			parts = append(parts, thinkingParts(t.Reasoning)...)
		}
		if t.Text != "" {
			parts = append(parts, textParts(t.Text)...)
		}
		m.Content = parts
	case t.Text != "" || len(t.ToolCalls) == 0:
		m.Content = t.Text
	}
	switch {
	case t.has(QuirkContentParts):
	case t.has(QuirkReasoningField):
		m.Reasoning = t.Reasoning
	default:
		m.ReasoningContent = t.Reasoning
	}
	for i, c := range t.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, call{ID: callID(c, seq, i), Type: "function", Function: fn{Name: c.Name, Arguments: c.arguments()}})
	}
	data, _ := json.Marshal(map[string]any{
		"id":      "chatcmpl-llmtest-" + strconv.Itoa(seq),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   model,
		"choices": []map[string]any{{"index": 0, "message": m, "finish_reason": finishReason(t)}},
		"usage":   usage,
	})
	return data
}

// usageFor is the turn's usage, or an estimate (4 bytes a token) so
// callers always see non-zero numbers.
func usageFor(t Turn, body []byte) Usage {
	if t.Usage != nil {
		return *t.Usage
	}
	out := len(t.Text) + len(t.Reasoning)
	for _, c := range t.ToolCalls {
		out += len(c.Name) + len(c.arguments())
	}
	return Usage{PromptTokens: promptTokens(body), CompletionTokens: max(1, out/4)}
}

// defaultSize splits s into about three pieces, at most 16 runes each.
func defaultSize(s string) int {
	n := len([]rune(s))
	return min(max((n+2)/3, 1), 16)
}

// pieces splits s into pieces of size runes, never inside a rune.
func pieces(s string, size int) []string {
	var out []string
	r := []rune(s)
	for len(r) > 0 {
		n := min(size, len(r))
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	return out
}

func ptr[T any](v T) *T { return &v }
