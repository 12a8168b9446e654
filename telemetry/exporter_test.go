package telemetry

import (
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"agent/event"
	"agent/telemetry/telemetrytest"
)

// env is a getenv of a fixed environment.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// warnings collects what an exporter warns.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) warn(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, msg)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		env      []string
		url      string // "" : no exporter
		protobuf bool
		timeout  time.Duration
		warning  string
	}{
		{name: "unset"},
		{name: "endpoint", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"},
			url: "http://c:4318/v1/traces", protobuf: true, timeout: DefaultTimeout},
		{name: "traces endpoint as it is, json", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t/custom", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json",
			"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "500"},
			url: "https://t/custom", timeout: 500 * time.Millisecond},
		{name: "grpc", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
			warning: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported (use http/protobuf or http/json); traces are not exported"},
		{name: "not a URL", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"},
			warning: "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318 is not an http:// or https:// URL; traces are not exported"},
		{name: "disabled", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_SDK_DISABLED", "true"}},
		{name: "exporter none", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_TRACES_EXPORTER", "none"}},
		{name: "bad timeout", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_EXPORTER_OTLP_TIMEOUT", "soon"},
			url: "http://c/v1/traces", protobuf: true, timeout: DefaultTimeout,
			warning: "OTEL_EXPORTER_OTLP_TIMEOUT=soon is not a number of milliseconds; using 2s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w warnings
			x := FromEnv(env(tt.env...), "1.2.3", w.warn)
			if got := strings.Join(w.all(), "\n"); got != tt.warning {
				t.Errorf("warned %q, want %q", got, tt.warning)
			}
			if tt.url == "" {
				if x != nil {
					t.Fatalf("an exporter to %s", x.url)
				}
				return
			}
			if x == nil {
				t.Fatal("no exporter")
			}
			if x.url != tt.url || x.protobuf != tt.protobuf || x.timeout != tt.timeout {
				t.Errorf("exporter to %s, protobuf %v, timeout %s", x.url, x.protobuf, x.timeout)
			}
		})
	}
}

// sampleTrace is a one-tool run.
func sampleTrace() *Trace {
	tr := NewTrace(testRunID, "sess-1", "run")
	for _, e := range []event.Event{
		ev(0, event.RunStarted, event.RunStartedData{Model: "gpt-test"}),
		ev(900, event.MessageCompleted, assistant(800, "call_1")),
		ev(910, event.ToolStarted, event.ToolStartedData{CallID: "call_1", Name: "write_file"}),
		ev(930, event.ToolCompleted, event.ToolCompletedData{CallID: "call_1", OK: true}),
		ev(1500, event.MessageCompleted, assistant(500)),
		ev(1510, event.RunCompleted, event.RunFinishedData{Status: "completed", Usage: event.Usage{PromptTokens: 200}}),
	} {
		tr.Observe(e)
	}
	return tr
}

// TestExportBothEncodings: what is sent in either protocol decodes, with
// the reference definitions, as the same request: the trace id, span ids,
// parents, times, attributes, status, resource and headers it should have.
func TestExportBothEncodings(t *testing.T) {
	t.Parallel()
	var decoded []*tracev1.TracesData
	for _, protocol := range []string{"http/protobuf", "http/json"} {
		c := telemetrytest.Start(t)
		var w warnings
		x := FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", c.URL(), "OTEL_EXPORTER_OTLP_PROTOCOL", protocol,
			"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20secret, x-team=agents",
			"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,service.name=ignored", "OTEL_SERVICE_NAME", "agent-ci"), "1.2.3", w.warn)
		tr := sampleTrace()
		// The builder's own spans, for comparing ids and times.
		x.Export(tr)
		reqs := c.Requests()
		if len(reqs) != 1 || len(w.all()) != 0 {
			t.Fatalf("%s: %d requests, warnings %q", protocol, len(reqs), w.all())
		}
		r := reqs[0]
		if r.Err != nil {
			t.Fatalf("%s: the body does not decode: %v", protocol, r.Err)
		}
		wantType := map[string]string{"http/protobuf": "application/x-protobuf", "http/json": "application/json"}[protocol]
		if r.Path != "/v1/traces" || r.ContentType != wantType || r.Header.Get("Authorization") != "Bearer secret" ||
			r.Header.Get("X-Team") != "agents" || r.Header.Get("User-Agent") != "agent/1.2.3" {
			t.Errorf("%s: %s %s, headers %v", protocol, r.Path, r.ContentType, r.Header)
		}
		rs := r.Traces.GetResourceSpans()
		if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || rs[0].GetScopeSpans()[0].GetScope().GetName() != "agent" {
			t.Fatalf("%s: %v", protocol, r.Traces)
		}
		res := map[string]string{}
		for _, kv := range rs[0].GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		if res["service.name"] != "agent-ci" || res["service.version"] != "1.2.3" || res["deployment.environment"] != "test" {
			t.Errorf("%s: resource %v", protocol, res)
		}
		spans := telemetrytest.Spans(reqs)
		built := tr.spans
		if len(spans) != len(built) {
			t.Fatalf("%s: %d spans sent, %d built", protocol, len(spans), len(built))
		}
		for i, s := range spans {
			b := built[i]
			if string(s.GetTraceId()) != string(tr.traceID[:]) || spanID(b.id) != hexOf(s.GetSpanId()) ||
				(b.parent != 0) != (len(s.GetParentSpanId()) > 0) || s.GetName() != b.name ||
				s.GetStartTimeUnixNano() != uint64(b.start.UnixNano()) || s.GetEndTimeUnixNano() != uint64(b.end.UnixNano()) ||
				int(s.GetKind()) != b.kind || int(s.GetStatus().GetCode()) != b.status {
				t.Errorf("%s: span %d sent as %v, built as %+v", protocol, i, s, b)
			}
		}
		run, tool := telemetrytest.Named(spans, "run")[0], telemetrytest.Named(spans, "execute_tool write_file")[0]
		if telemetrytest.Attr(run, "agent.run.id") != testRunID || telemetrytest.Attr(run, "gen_ai.usage.input_tokens") != "200" ||
			telemetrytest.Attr(tool, "agent.tool.outcome") != "ok" || telemetrytest.Parent(spans, tool).GetName() != "chat gpt-test" {
			t.Errorf("%s: run %v, tool %v", protocol, run.GetAttributes(), tool)
		}
		decoded = append(decoded, r.Traces)
	}
	// Span ids are random: the two requests are two traces' worth, so
	// compare them with ids cleared.
	for _, m := range decoded {
		clearIDs(m)
	}
	if !proto.Equal(decoded[0], decoded[1]) {
		t.Errorf("protobuf and JSON decode differently:\n%v\n%v", decoded[0], decoded[1])
	}
}

// TestExportBatches: a long run's trace goes in requests of maxSpans.
func TestExportBatches(t *testing.T) {
	t.Parallel()
	c := telemetrytest.Start(t)
	x := FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", c.URL()), "1", func(msg string) { t.Error(msg) })
	tr := NewTrace(testRunID, "", "run")
	tr.Observe(ev(0, event.RunStarted, event.RunStartedData{}))
	for i := range maxSpans + 10 {
		tr.Observe(ev(i+1, event.MessageCompleted, assistant(0)))
	}
	x.Export(tr)
	reqs := c.Requests()
	if len(reqs) != 2 || len(telemetrytest.Spans(reqs)) != maxSpans+12 { // the run, its iteration, the calls
		t.Errorf("%d requests with %d spans", len(reqs), len(telemetrytest.Spans(reqs)))
	}
}

// TestExportToDeadCollector: a refused connection, a collector that never
// answers and one that answers an error each cost one warning and at most
// the timeout.
func TestExportToDeadCollector(t *testing.T) {
	t.Parallel()
	hang, err := net.Listen("tcp", "127.0.0.1:0") // accepts (the backlog) and never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)
	// The collector that hangs costs the timeout (its warning says which);
	// the others' is ten minutes, which they must not wait. The bound is
	// generous: a loaded machine may take seconds for a request.
	const patience = time.Minute
	for _, tt := range []struct {
		name, endpoint, timeoutMS, warning string
	}{
		{"refused", "http://" + refusedAddr, "600000", "connection refused"},
		{"hangs", "http://" + hang.Addr().String(), "300", "did not answer within 300ms"},
		{"answers 503", failing.URL, "600000", "answered 503 Service Unavailable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w warnings
			x := FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", tt.endpoint, "OTEL_EXPORTER_OTLP_TIMEOUT", tt.timeoutMS), "1", w.warn)
			began := time.Now()
			x.Export(sampleTrace())
			if took := time.Since(began); took > patience {
				t.Errorf("export took %s", took)
			}
			lines := w.all()
			if len(lines) != 1 || !strings.Contains(lines[0], tt.warning) || !strings.Contains(lines[0], "the trace of run "+testRunID+" was not exported") {
				t.Errorf("warnings %q, want one with %q", lines, tt.warning)
			}
		})
	}
}

// TestExportLater: background exports are waited for.
func TestExportLater(t *testing.T) {
	t.Parallel()
	c := telemetrytest.Start(t)
	x := FromEnv(env("OTEL_EXPORTER_OTLP_ENDPOINT", c.URL()), "1", func(msg string) { t.Error(msg) })
	for range 3 {
		x.ExportLater(sampleTrace())
	}
	x.Wait()
	if n := len(c.Requests()); n != 3 {
		t.Errorf("%d requests after Wait, want 3", n)
	}
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

func clearIDs(d *tracev1.TracesData) {
	for _, rs := range d.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				s.SpanId, s.ParentSpanId = nil, nil
			}
		}
	}
}
