package mcpserve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A line that is not JSON-RPC gets its error response and the server reads
// on; blank lines and spaces around a message are no error; closing stdin
// ends the server without an error.
func TestStdioAnswersBadLinesAndGoesOn(t *testing.T) {
	// A pipe with a buffer, as stdin is: a server that stopped reading
	// fails the test instead of blocking it.
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	outR, outW := io.Pipe()
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "hello", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hi"}}}, nil
		})
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(context.Background(), stdioTransport(inR, outW, slog.New(slog.DiscardHandler)))
		outW.Close()
	}()
	lines := make(chan map[string]any)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var m map[string]any
			_ = json.Unmarshal(sc.Bytes(), &m)
			lines <- m
		}
		close(lines)
	}()
	send := func(line string) {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func(what string) map[string]any {
		select {
		case m := <-lines:
			return m
		case <-time.After(time.Minute): // a safety net: a loaded machine may take seconds
			t.Fatalf("no answer to %s", what)
			return nil
		}
	}
	code := func(m map[string]any) any {
		e, _ := m["error"].(map[string]any)
		return e["code"]
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"0"}}}`)
	if m := next("initialize"); m["id"] != 1.0 {
		t.Fatalf("initialize: %v", m)
	}
	send(`  {"jsonrpc":"2.0","method":"notifications/initialized"}   `)
	send(``)
	send(`{not json`)
	if m := next("{not json"); code(m) != -32700.0 || m["id"] != nil {
		t.Errorf("{not json: %v, want -32700 with id null", m)
	}
	send(`[]`)
	if m := next("[]"); code(m) != -32600.0 {
		t.Errorf("[]: %v, want -32600", m)
	}
	send(`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"hello"}}`)
	if m := next("tools/call"); m["id"] != "a" || m["result"] == nil {
		t.Errorf("tools/call after bad lines: %v", m)
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil && err != io.EOF {
			t.Errorf("the server ended with %v when stdin closed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the server did not end when stdin closed")
	}
}
