// Package telemetrytest is an OpenTelemetry collector for tests: an
// OTLP/HTTP server on 127.0.0.1 that decodes what it is sent with the
// reference protobuf definitions, so a test sees what a real collector
// would. Only tests import it; the binary never links them.
package telemetrytest

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Request is one export the collector received.
type Request struct {
	Path        string
	ContentType string
	Header      http.Header
	// Traces is the body, decoded. An ExportTraceServiceRequest has the
	// fields of TracesData, with the same numbers and JSON names; its own
	// Go type would bring in gRPC.
	Traces *tracev1.TracesData
	Err    error // why the body did not decode
}

// Collector records the exports it receives.
type Collector struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []Request
	changed  chan struct{} // closed and replaced at each request
}

// Start starts a collector that answers every export with 200, until the
// test ends.
func Start(t testing.TB) *Collector {
	c := &Collector{changed: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

// URL is the collector's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func (c *Collector) URL() string { return c.srv.URL }

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := Request{Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"), Header: r.Header.Clone(), Traces: &tracev1.TracesData{}}
	if err == nil {
		switch req.ContentType {
		case "application/json":
			err = unmarshalJSON(body, req.Traces)
		default:
			err = proto.Unmarshal(body, req.Traces)
		}
	}
	req.Err = err
	c.mu.Lock()
	c.requests = append(c.requests, req)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", req.ContentType)
	w.Write([]byte("{}"))
}

// Requests returns the exports received so far.
func (c *Collector) Requests() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.requests)
}

// Wait waits up to timeout for n exports, and returns those received.
func (c *Collector) Wait(n int, timeout time.Duration) []Request {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		got, changed := slices.Clone(c.requests), c.changed
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			return got
		}
	}
}

// Spans returns every span of the requests.
func Spans(reqs []Request) []*tracev1.Span {
	var out []*tracev1.Span
	for _, r := range reqs {
		for _, rs := range r.Traces.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				out = append(out, ss.GetSpans()...)
			}
		}
	}
	return out
}

// Named returns the spans with this name.
func Named(spans []*tracev1.Span, name string) []*tracev1.Span {
	var out []*tracev1.Span
	for _, s := range spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// Parent returns the span's parent among spans, or nil.
func Parent(spans []*tracev1.Span, s *tracev1.Span) *tracev1.Span {
	if len(s.GetParentSpanId()) == 0 {
		return nil
	}
	for _, p := range spans {
		if string(p.GetSpanId()) == string(s.GetParentSpanId()) {
			return p
		}
	}
	return nil
}

// Attr returns a span's attribute as it prints ("" if it has none).
func Attr(s *tracev1.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() != key {
			continue
		}
		switch v := kv.GetValue().GetValue().(type) {
		case *commonv1.AnyValue_StringValue:
			return v.StringValue
		case *commonv1.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonv1.AnyValue_BoolValue:
			return strconv.FormatBool(v.BoolValue)
		case *commonv1.AnyValue_DoubleValue:
			return strconv.FormatFloat(v.DoubleValue, 'g', -1, 64)
		}
	}
	return ""
}

// unmarshalJSON decodes OTLP/JSON. It differs from protobuf's JSON
// mapping, which protojson speaks, in one way: ids are hex, not base64
// (OTLP specification, "JSON Protobuf Encoding"). So they are checked and
// turned into base64 first.
func unmarshalJSON(body []byte, m proto.Message) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	if err := hexIDs(v); err != nil {
		return err
	}
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(body, m)
}

func hexIDs(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if id, ok := val.(string); ok && (k == "traceId" || k == "spanId" || k == "parentSpanId") {
				b, err := hex.DecodeString(id)
				if err != nil {
					return fmt.Errorf("%s %q is not hex: %w", k, id, err)
				}
				x[k] = base64.StdEncoding.EncodeToString(b)
				continue
			}
			if err := hexIDs(val); err != nil {
				return err
			}
		}
	case []any:
		for _, val := range x {
			if err := hexIDs(val); err != nil {
				return err
			}
		}
	}
	return nil
}
