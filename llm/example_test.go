package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"testing"

	"agent/llm"
	"agent/llm/llmtest"
)

func ExampleClient_Stream() {
	srv, err := llmtest.Start(llmtest.Script{Turns: []llmtest.Turn{
		{Text: "Let me check.", ToolCalls: []llmtest.Call{{Name: "ls", Arguments: json.RawMessage(`{"dir":"."}`)}}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	c, err := llm.New(llm.Config{BaseURL: srv.URL()})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := c.Stream(context.Background(), llm.Request{
		Model:    "any",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "what is here?"}},
		Tools:    []llm.Tool{{Name: "ls", Description: "list a directory"}},
	}, func(delta string) { fmt.Printf("delta %q\n", delta) })
	if err != nil {
		log.Fatal(err)
	}
	call := resp.Message.ToolCalls[0]
	fmt.Println(resp.FinishReason, call.ID, call.Name, call.Arguments)
	// Output:
	// delta "Let m"
	// delta "e che"
	// delta "ck."
	// tool_calls call_1_1 ls {"dir":"."}
}

// BenchmarkStream measures the client's per-reply overhead against the
// local fake (HTTP, SSE parsing, assembly), not any model's speed.
func BenchmarkStream(b *testing.B) {
	text := make([]byte, 2000)
	for i := range text {
		text[i] = 'a' + byte(i%26)
	}
	srv, err := llmtest.Start(llmtest.Script{Loop: true, Turns: []llmtest.Turn{
		{Text: string(text)},
		{ToolCalls: []llmtest.Call{{Name: "write_file", RawArguments: `{"path":"a.txt","content":"` + string(text) + `"}`}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := llm.New(llm.Config{BaseURL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	req := llm.Request{Model: "bench", Messages: []llm.Message{{Role: llm.RoleUser, Content: "go"}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Stream(context.Background(), req, nil); err != nil {
			b.Fatal(err)
		}
	}
}
