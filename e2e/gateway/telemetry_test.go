package gateway

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/telemetry"
	"agent/telemetry/telemetrytest"
)

// Metrics and traces (README.md#metrics-and-traces), end to end: the real binary and an
// OTLP/HTTP collector on 127.0.0.1 that decodes what it gets with the
// reference protobuf definitions.

// oneToolTurns: the model writes a file, then says it is done.
func oneToolTurns() []llmtest.Turn {
	return []llmtest.Turn{
		{Text: "Writing it.", ToolCalls: []llmtest.Call{e2etest.ToolCall("write_file", `{"path":"hello.txt","content":"hi\n"}`)}},
		{Text: "Done."},
	}
}

// one returns the only span with this name.
func one(t *testing.T, spans []*tracev1.Span, name string) *tracev1.Span {
	t.Helper()
	got := telemetrytest.Named(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q, want 1; spans: %s", len(got), name, spanNames(spans))
	}
	return got[0]
}

func spanNames(spans []*tracev1.Span) string {
	var names []string
	for _, s := range spans {
		names = append(names, s.GetName())
	}
	return strings.Join(names, ", ")
}

// checkParent fails unless child's parent is the span named parent.
func checkParent(t *testing.T, spans []*tracev1.Span, child *tracev1.Span, parent string) {
	t.Helper()
	if p := telemetrytest.Parent(spans, child); p == nil || p.GetName() != parent {
		t.Errorf("%s's parent is %v, want %s", child.GetName(), p.GetName(), parent)
	}
}

// TestRunExportsTrace: `agent run` of a one-tool task with
// OTEL_EXPORTER_OTLP_ENDPOINT set sends one request, before it exits, with
// one trace (its id the run id): run → iteration → model call → tool call,
// with the run's id, status and tokens, the model and the
// tool's outcome. Both protocols.
func TestRunExportsTrace(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"http/protobuf", "http/json"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			e := e2etest.New(t, oneToolTurns()...)
			c := telemetrytest.Start(t)
			res, _ := e.RunWith([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL(), "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
				"OTEL_SERVICE_NAME=agent-e2e"}, "run", "--json", "write hello.txt")
			if res.Code != 0 || res.Stderr != "" {
				t.Fatalf("exit %d, stderr %q", res.Code, res.Stderr)
			}
			evs := e2etest.DecodeEvents(t, res.Stdout)
			runID := evs[0].RunID
			reqs := c.Requests() // the export is done before agent exits
			if len(reqs) != 1 || reqs[0].Err != nil || reqs[0].Path != "/v1/traces" {
				t.Fatalf("%d requests: %+v", len(reqs), reqs)
			}
			spans := telemetrytest.Spans(reqs)
			if len(spans) != 5 {
				t.Errorf("spans: %s; want run, iteration, two model calls, one tool call", spanNames(spans))
			}
			run := one(t, spans, "run")
			iteration := one(t, spans, "iteration")
			tool := one(t, spans, "execute_tool write_file")
			models := telemetrytest.Named(spans, "chat test-model")
			if len(models) != 2 {
				t.Fatalf("model calls: %s", spanNames(spans))
			}
			if len(run.GetParentSpanId()) != 0 {
				t.Error("the run span has a parent")
			}
			checkParent(t, spans, iteration, "run")
			for _, m := range models {
				checkParent(t, spans, m, "iteration")
			}
			checkParent(t, spans, tool, "chat test-model")
			if p := telemetrytest.Parent(spans, tool); p != models[0] {
				t.Error("the tool call is not under the model call that asked for it")
			}
			for _, s := range spans {
				if hex.EncodeToString(s.GetTraceId()) != strings.ReplaceAll(runID, "-", "") {
					t.Errorf("%s: trace id %x, want the run id %s", s.GetName(), s.GetTraceId(), runID)
				}
				if s.GetEndTimeUnixNano() < s.GetStartTimeUnixNano() || s.GetStartTimeUnixNano() < run.GetStartTimeUnixNano() {
					t.Errorf("%s: %d … %d, run from %d", s.GetName(), s.GetStartTimeUnixNano(), s.GetEndTimeUnixNano(), run.GetStartTimeUnixNano())
				}
			}
			fin := e2etest.LastFinished(t, evs)
			for key, want := range map[string]string{
				"agent.run.id": runID, "agent.run.status": "completed", "agent.run.kind": "run",
				"gen_ai.request.model": "test-model", "gen_ai.usage.input_tokens": strconv.Itoa(fin.Usage.PromptTokens),
			} {
				if got := telemetrytest.Attr(run, key); got != want {
					t.Errorf("run %s = %q, want %q", key, got, want)
				}
			}
			if telemetrytest.Attr(tool, "agent.tool.outcome") != "ok" || tool.GetStatus().GetCode() != tracev1.Status_STATUS_CODE_OK {
				t.Errorf("tool span %v", tool)
			}
			if telemetrytest.Attr(models[0], "gen_ai.usage.output_tokens") == "" {
				t.Errorf("model span without tokens: %v", models[0].GetAttributes())
			}
			if rs := reqs[0].Traces.GetResourceSpans()[0]; telemetrytest.Attr(&tracev1.Span{Attributes: rs.GetResource().GetAttributes()}, "service.name") != "agent-e2e" {
				t.Errorf("resource %v", rs.GetResource())
			}
		})
	}
}

// TestRunWithDeadCollector: a collector that never answers, or refuses
// the connection, changes neither the run's exit code nor its events; it
// costs one warning line on stderr and at most the export timeout.
func TestRunWithDeadCollector(t *testing.T) {
	t.Parallel()
	hang, err := net.Listen("tcp", "127.0.0.1:0") // accepts and never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	var tries atomic.Int32 // connections to the collector that hangs: one per export
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			tries.Add(1)
			t.Cleanup(func() { c.Close() })
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedURL := "http://" + refused.Addr().String()
	refused.Close()

	plain := e2etest.New(t, oneToolTurns()...)
	want, plainTook := plain.RunWith(nil, "run", "--json", "write hello.txt")
	if want.Code != 0 {
		t.Fatalf("exit %d: %s", want.Code, want.Stderr)
	}
	for _, tt := range []struct{ name, endpoint, warning string }{
		{"hangs", "http://" + hang.Addr().String(), "did not answer within 2s"},
		{"refused", refusedURL, "connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := e2etest.New(t, oneToolTurns()...)
			res, took := e.RunWith([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + tt.endpoint}, "run", "--json", "write hello.txt")
			if res.Code != want.Code || eventTypes(e2etest.DecodeEvents(t, res.Stdout)) != eventTypes(e2etest.DecodeEvents(t, want.Stdout)) {
				t.Errorf("exit %d, events %s; without traces: exit %d, %s", res.Code, eventTypes(e2etest.DecodeEvents(t, res.Stdout)),
					want.Code, eventTypes(e2etest.DecodeEvents(t, want.Stdout)))
			}
			lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "warning: the trace of run ") || !strings.Contains(lines[0], tt.warning) {
				t.Errorf("stderr %q, want one warning with %q", res.Stderr, tt.warning)
			}
			// One try, which waits the timeout at most: the warning names
			// it. The bound on the whole run only catches a hang, since
			// two runs of a loaded machine may differ by seconds.
			if n := tries.Load(); tt.name == "hangs" && n != 1 {
				t.Errorf("%d connections to the collector, want one", n)
			}
			if limit := plainTook + telemetry.DefaultTimeout + e2etest.Patience; took > limit {
				t.Errorf("the run took %s; %s without traces", took, plainTook)
			}
		})
	}
}

// TestHarnessExportsPhases: a harness run's trace has the planner and
// each phase under the run, iterations under phases, and model and tool
// calls below them.
func TestHarnessExportsPhases(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"Two notes","phases":[
		{"id":"alpha","title":"Note A","instructions":"Write a.md.","evidence":{"type":"artifact","artifacts":["a.md"]}},
		{"id":"beta","title":"Note B","instructions":"Write b.md.","depends_on":["alpha"],"evidence":{"type":"artifact","artifacts":["b.md"]}}]}`)
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("alpha", e2etest.WriteTurn("a.md", "A\n"), llmtest.Turn{Text: "a.md written."})...)
	turns = append(turns, e2etest.ForPhase("beta", e2etest.WriteTurn("b.md", "B\n"), llmtest.Turn{Text: "b.md written."})...)
	e := e2etest.NewHarness(t, turns...)
	c := telemetrytest.Start(t)
	res, _ := e.RunWith([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL()}, "harness", "--json", "write two notes")
	if res.Code != 0 {
		t.Fatalf("harness exit %d: %s", res.Code, res.Stderr)
	}
	spans := telemetrytest.Spans(c.Requests())
	run := one(t, spans, "run")
	if telemetrytest.Attr(run, "agent.run.kind") != "harness" || telemetrytest.Attr(run, "agent.run.status") != "completed" {
		t.Errorf("run span %v", run.GetAttributes())
	}
	for _, name := range []string{"plan", "phase alpha", "phase beta"} {
		checkParent(t, spans, one(t, spans, name), "run")
	}
	alpha := one(t, spans, "phase alpha")
	if telemetrytest.Attr(alpha, "agent.phase.title") != "Note A" || telemetrytest.Attr(alpha, "agent.phase.status") != "passed" {
		t.Errorf("phase alpha %v", alpha.GetAttributes())
	}
	iterations := telemetrytest.Named(spans, "iteration")
	if len(iterations) != 3 {
		t.Errorf("%d iterations, want one for the planner and each phase: %s", len(iterations), spanNames(spans))
	}
	for _, tool := range telemetrytest.Named(spans, "execute_tool write_file") {
		model := telemetrytest.Parent(spans, tool)
		it := telemetrytest.Parent(spans, model)
		phase := telemetrytest.Parent(spans, it)
		if model.GetName() != "chat test-model" || it.GetName() != "iteration" || !strings.HasPrefix(phase.GetName(), "phase ") {
			t.Errorf("tool call under %s < %s < %s", model.GetName(), it.GetName(), phase.GetName())
		}
	}
	if n := len(telemetrytest.Named(spans, "execute_tool write_file")); n != 2 {
		t.Errorf("%d write_file calls traced, want 2", n)
	}
}

// TestGatewayMetricsAndTraces: a gateway run with a tool call shows in
// GET /metrics (runs, tokens, the tool call, a model latency for each
// model call, the queues), which refuses a request without the token; and
// its trace reaches the collector, sent in the background.
func TestGatewayMetricsAndTraces(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, oneToolTurns()...)
	c := telemetrytest.Start(t)
	srv, _ := e.InProcessGateway(func(cfg *gateway.Config) {
		cfg.Env = append(cfg.Env, "OTEL_EXPORTER_OTLP_ENDPOINT="+c.URL())
	})
	ws := e2etest.GwDial(t, srv.Addr())
	sid := e2etest.GwCall[api.SessionInfo](t, ws, api.MethodSessionCreate, nil).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, ws, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})
	run := e2etest.GwCall[api.RunStartResult](t, ws, api.MethodRunStart, api.RunStartParams{SessionID: sid, Input: "write hello.txt"})
	evs := e2etest.GwWait(t, ws, run.RunID)
	fin := e2etest.FinishedFrame(t, evs[len(evs)-1])
	if fin.Status != event.StatusCompleted {
		t.Fatalf("run ended %+v", fin)
	}

	url := "http://" + srv.Addr() + "/metrics"
	for _, header := range []map[string]string{nil, {"Authorization": "Bearer wrong"}} {
		if code, body := httpGet(t, url, header); code != 401 || strings.Contains(body, "agent_runs") {
			t.Errorf("GET /metrics with %v: %d %s", header, code, body)
		}
	}
	code, body := httpGet(t, url, map[string]string{"Authorization": "Bearer " + e2etest.GwToken})
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	for _, want := range []string{
		"# TYPE agent_runs gauge",
		`agent_runs{status="completed"} 1`,
		`agent_runs{status="running"} 0`,
		"# TYPE agent_tokens_total counter",
		`agent_tokens_total{type="prompt"} ` + strconv.Itoa(fin.Usage.PromptTokens),
		`agent_tokens_total{type="completion"} ` + strconv.Itoa(fin.Usage.CompletionTokens),
		"# TYPE agent_tool_calls_total counter",
		`agent_tool_calls_total{tool="write_file",outcome="ok"} 1`,
		"# TYPE agent_model_call_duration_seconds histogram",
		`agent_model_call_duration_seconds_bucket{le="+Inf"} 2`,
		"agent_model_call_duration_seconds_count 2",
		`agent_queue_depth{queue="workers"} 0`,
		`agent_queue_depth{queue="gateway"} 0`,
		`agent_job_runs{status="completed"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}

	reqs := c.Wait(1, 5*time.Second)
	if len(reqs) != 1 {
		t.Fatalf("%d trace exports, want 1", len(reqs))
	}
	spans := telemetrytest.Spans(reqs)
	run0 := one(t, spans, "run")
	if telemetrytest.Attr(run0, "agent.run.id") != run.RunID || telemetrytest.Attr(run0, "agent.session.id") != sid {
		t.Errorf("run span %v", run0.GetAttributes())
	}
	checkParent(t, spans, one(t, spans, "execute_tool write_file"), "chat test-model")
}

func httpGet(t *testing.T, url string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestClusterHarnessTrace: a harness run on a shared store, its phase
// attempt run by a worker from the attempt queue, exports the same span
// tree as one run in one process: the phase under the run, its iteration,
// model call and tool call below it.
func TestClusterHarnessTrace(t *testing.T) {
	t.Parallel()
	planArgs := json.RawMessage(`{"objective":"A note","phases":[
		{"id":"alpha","title":"Note A","instructions":"Write a.md.","evidence":{"type":"artifact","artifacts":["a.md"]}}]}`)
	turns := []llmtest.Turn{{When: e2etest.PlannerMarker, ToolCalls: []llmtest.Call{{Name: "submit_plan", Arguments: planArgs}}}}
	turns = append(turns, e2etest.ForPhase("alpha", e2etest.WriteTurn("a.md", "A\n"), llmtest.Turn{Text: "a.md written."})...)
	e := e2etest.New(t, turns...)
	collector := telemetrytest.Start(t)
	_, c, sid := e.SmallCluster(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL())
	run := e2etest.GwCall[api.RunStartResult](t, c, api.MethodRunStart, api.RunStartParams{
		SessionID: sid, Input: "write a note", Options: api.RunOptions{Harness: true}})
	if end := e2etest.LastFrame(e2etest.GwWait(t, c, run.RunID)); end.Event != event.RunCompleted {
		t.Fatalf("harness ended %s", end.Event)
	}
	var spans []*tracev1.Span
	e2etest.WaitFor(t, "the worker to export the harness's trace", func() bool {
		spans = telemetrytest.Spans(collector.Requests())
		return len(telemetrytest.Named(spans, "run")) == 1
	})
	checkParent(t, spans, one(t, spans, "phase alpha"), "run")
	tool := one(t, spans, "execute_tool write_file")
	model := telemetrytest.Parent(spans, tool)
	it := telemetrytest.Parent(spans, model)
	if model.GetName() != "chat test-model" || it.GetName() != "iteration" || telemetrytest.Parent(spans, it).GetName() != "phase alpha" {
		t.Errorf("the attempt's tool call is under %s < %s < %s, want a model call, an iteration and its phase: %s",
			model.GetName(), it.GetName(), telemetrytest.Parent(spans, it).GetName(), spanNames(spans))
	}
}
