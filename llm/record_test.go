package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"agent/llm"
	"agent/llm/llmtest"
)

func conversation() []llm.Request {
	first := llm.Request{
		Model:    "recorded-model",
		Messages: []llm.Message{{Role: llm.RoleSystem, Content: "be brief"}, {Role: llm.RoleUser, Content: "read a.txt"}},
		Tools:    simpleRequest.Tools,
	}
	second := first
	second.Messages = append(append([]llm.Message(nil), first.Messages...),
		llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.txt"}`}}},
		llm.Message{Role: llm.RoleTool, ToolCallID: "call_a", Content: "hello"},
	)
	return []llm.Request{first, second}
}

// record runs the conversation against a fake server and returns the cassette.
func record(t *testing.T) ([]byte, []*llm.Response) {
	t.Helper()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{
		{Text: "Reading.", ToolCalls: []llmtest.Call{readCall}, Reasoning: "need the file"},
		{Text: "It says hello."},
	}})
	c, _ := newClient(t, srv.URL(), nil)
	var cassette bytes.Buffer
	rec := llm.NewRecorder(c, &cassette, "")
	var resps []*llm.Response
	for _, req := range conversation() {
		resp, err := rec.Stream(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	return cassette.Bytes(), resps
}

func TestRecordReplayRoundTrip(t *testing.T) {
	t.Parallel()
	cassette, recorded := record(t)
	if n := bytes.Count(cassette, []byte("\n")); n != 2 {
		t.Fatalf("cassette has %d lines, want 2:\n%s", n, cassette)
	}
	var line map[string]json.RawMessage
	if err := json.Unmarshal(bytes.SplitN(cassette, []byte("\n"), 2)[0], &line); err != nil || line["request"] == nil || line["response"] == nil {
		t.Fatalf("cassette line is not {request, response}: %v\n%s", err, cassette)
	}

	rp, err := llm.NewReplayer(bytes.NewReader(cassette), "")
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range conversation() {
		req.Model = "another-model" // the model is not compared
		var text string
		resp, err := rp.Stream(context.Background(), req, func(s string) { text += s })
		if err != nil {
			t.Fatalf("replay %d: %v", i+1, err)
		}
		if !reflect.DeepEqual(resp, recorded[i]) {
			t.Errorf("replay %d = %+v, want %+v", i+1, resp, recorded[i])
		}
		if text != recorded[i].Message.Content {
			t.Errorf("replay %d onText %q, want %q", i+1, text, recorded[i].Message.Content)
		}
	}
	_, err = rp.Stream(context.Background(), conversation()[0], nil)
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindReplay || err.Error() != "replay: cassette has only 2 exchanges" {
		t.Errorf("past the end: %v", err)
	}
}

func TestReplayMismatchNamesThePath(t *testing.T) {
	t.Parallel()
	cassette, _ := record(t)
	long := strings.Repeat("x", 200)
	tests := []struct {
		name string
		edit func(*llm.Request)
		want string
	}{
		{
			name: "content",
			edit: func(r *llm.Request) { r.Messages[3].Content = "goodbye" },
			want: `replay: request 2 differs from the cassette at messages[3].content: got "goodbye" want "hello"`,
		},
		{
			name: "extra message",
			edit: func(r *llm.Request) {
				r.Messages = append(r.Messages, llm.Message{Role: llm.RoleUser, Content: "more"})
			},
			want: `replay: request 2 differs from the cassette at messages[4]: got {"content":"more","role":"user"} want nothing`,
		},
		{
			name: "tool call arguments",
			edit: func(r *llm.Request) { r.Messages[2].ToolCalls[0].Arguments = `{"path":"b.txt"}` },
			want: `at messages[2].tool_calls[0].arguments: got "{\"path\":\"b.txt\"}" want "{\"path\":\"a.txt\"}"`,
		},
		{
			name: "tools dropped",
			edit: func(r *llm.Request) { r.Tools = nil },
			want: `at tools: got nothing want [{`,
		},
		{
			name: "long values are cut around the difference",
			edit: func(r *llm.Request) { r.Messages[3].Content = "hello" + long },
			want: `at messages[3].content: got "hello` + strings.Repeat("x", 55) + `…" want "hello"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rp, err := llm.NewReplayer(bytes.NewReader(cassette), "")
			if err != nil {
				t.Fatal(err)
			}
			reqs := conversation()
			if _, err := rp.Stream(context.Background(), reqs[0], nil); err != nil {
				t.Fatal(err)
			}
			req := reqs[1]
			req.Messages = append([]llm.Message(nil), req.Messages...)
			req.Messages[2].ToolCalls = append([]llm.ToolCall(nil), req.Messages[2].ToolCalls...)
			tt.edit(&req)
			_, err = rp.Stream(context.Background(), req, nil)
			var e *llm.Error
			if !errors.As(err, &e) || e.Kind != llm.KindReplay {
				t.Fatalf("err = %v, want a replay *Error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%s\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}

func TestReplayerRejectsMalformedCassette(t *testing.T) {
	t.Parallel()
	cassette, _ := record(t)
	bad := append(append([]byte(nil), cassette...), []byte("\n{not json\n")...)
	_, err := llm.NewReplayer(bytes.NewReader(bad), "")
	if err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("err = %v, want it to name line 4", err)
	}
	_, err = llm.NewReplayer(strings.NewReader(`{"request":{"model":"m","messages":[]}}`+"\n"), "")
	if err == nil || !strings.Contains(err.Error(), "line 1: no response") {
		t.Errorf("err = %v, want line 1: no response", err)
	}
}

func TestRecorderSkipsFailures(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Status: 400}}})
	c, _ := newClient(t, srv.URL(), nil)
	var cassette bytes.Buffer
	if _, err := llm.NewRecorder(c, &cassette, "").Stream(context.Background(), simpleRequest, nil); err == nil {
		t.Fatal("want an error")
	}
	if cassette.Len() != 0 {
		t.Errorf("failed call recorded: %s", cassette.String())
	}
}

func TestReplayHonoursCancellation(t *testing.T) {
	t.Parallel()
	cassette, _ := record(t)
	rp, err := llm.NewReplayer(bytes.NewReader(cassette), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rp.Stream(ctx, conversation()[0], nil); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// Scopes let several processes share one cassette: each replays only the
// exchanges recorded under its own scope, in order.
func TestReplayScopes(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Script{Turns: []llmtest.Turn{{Text: "for a"}, {Text: "for b"}}})
	c, _ := newClient(t, srv.URL(), nil)
	var cassette bytes.Buffer
	for _, scope := range []string{"phase-a", "phase-b"} {
		if _, err := llm.NewRecorder(c, &cassette, scope).Stream(context.Background(), simpleRequest, nil); err != nil {
			t.Fatal(err)
		}
	}
	rp, err := llm.NewReplayer(bytes.NewReader(cassette.Bytes()), "phase-b")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rp.Stream(context.Background(), simpleRequest, nil)
	if err != nil || resp.Message.Content != "for b" {
		t.Fatalf("phase-b replay = %+v, %v", resp, err)
	}
	if _, err := rp.Stream(context.Background(), simpleRequest, nil); err == nil {
		t.Error("phase-b replayed phase-a's exchange")
	}
}
