package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
)

// TestGatewayOutputSchema: run.start's options.output_schema (the schema
// itself, as the gateway cannot read the client's files) holds for a run
// in an `agent runner` child: an answer sent back once, then the output in
// run.completed; a schema that is no JSON Schema is invalid_options.
func TestGatewayOutputSchema(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`)
	e := e2etest.New(t,
		llmtest.Turn{Text: `{"ok": "yes"}`},
		llmtest.Turn{Text: `{"ok": true}`},
	)
	srv, _ := e.InProcessGateway(nil)
	c := e2etest.GwDial(t, srv.Addr())

	ctx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	err := c.Call(ctx, api.MethodRunStart, api.RunStartParams{Input: "check", Options: api.RunOptions{OutputSchema: json.RawMessage(`{"type":"boolen"}`)}}, nil)
	if api.ErrorCode(err) != api.CodeInvalidOptions || !strings.Contains(err.Error(), "options.output_schema") {
		t.Errorf("a bad schema: %v, want invalid_options naming options.output_schema", err)
	}

	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{Input: "check",
		Options: api.RunOptions{OutputSchema: schema, AskHuman: new(false)}})
	evs := e2etest.GwWait(t, c, run.RunID)
	last := e2etest.LastFrame(evs)
	fin := e2etest.FinishedFrame(t, last)
	if last.Event != event.RunCompleted || string(fin.Output) != `{"ok":true}` || fin.Turns != 2 {
		t.Errorf("end = %s %+v, want run.completed with output {\"ok\":true} after 2 turns", last.Event, fin)
	}
	if n := e.Srv.RequestCount(); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}
