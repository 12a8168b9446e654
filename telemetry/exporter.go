// Package telemetry tells the tools that watch agent what it does: runs
// as OpenTelemetry traces, sent over OTLP/HTTP when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, and metrics in Prometheus's text
// format. It knows events, not who drives runs: the supervisor feeds it
// every run's events and the gateway serves its metrics.
package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout bounds one run's export: a dead or slow collector costs a
// run at most this, and never changes how it ends.
const DefaultTimeout = 2 * time.Second

// maxSpans is the most spans one request carries; a long run's trace
// takes several.
const maxSpans = 1000

// Exporter sends runs' traces to an OpenTelemetry collector. It is safe
// for concurrent use.
type Exporter struct {
	url      string
	header   http.Header
	protobuf bool
	timeout  time.Duration
	resource []attr
	version  string
	client   *http.Client
	warn     func(string)
	later    sync.WaitGroup
}

// FromEnv configures an exporter from OpenTelemetry's standard variables:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is) or
// OTEL_EXPORTER_OTLP_ENDPOINT (with /v1/traces added); _HEADERS,
// _PROTOCOL (http/protobuf, the default, or http/json) and _TIMEOUT (ms),
// each also as OTEL_EXPORTER_OTLP_TRACES_…; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES; OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER.
// It returns nil when no endpoint is set, so that tracing then costs
// nothing. What it cannot honour it says, once, through warn, which also
// gets one line for each export that fails.
func FromEnv(getenv func(string) string, version string, warn func(string)) *Exporter {
	endpoint, name := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if endpoint == "" {
		endpoint, name = getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "OTEL_EXPORTER_OTLP_ENDPOINT"
		if endpoint != "" {
			endpoint = strings.TrimRight(endpoint, "/") + "/v1/traces"
		}
	}
	if endpoint == "" || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return nil
	}
	switch exporters := getenv("OTEL_TRACES_EXPORTER"); {
	case exporters == "none":
		return nil
	case exporters != "" && !strings.Contains(exporters, "otlp"):
		warn(fmt.Sprintf("OTEL_TRACES_EXPORTER=%s is not supported (only otlp); traces are not exported", exporters))
		return nil
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		warn(fmt.Sprintf("%s=%s is not an http:// or https:// URL; traces are not exported", name, getenv(name)))
		return nil
	}
	// A signal's own variable wins over the general one.
	setting := func(suffix string) (string, string) {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + suffix); v != "" {
			return v, "OTEL_EXPORTER_OTLP_TRACES_" + suffix
		}
		return getenv("OTEL_EXPORTER_OTLP_" + suffix), "OTEL_EXPORTER_OTLP_" + suffix
	}
	x := &Exporter{url: endpoint, header: http.Header{}, protobuf: true, timeout: DefaultTimeout, version: version, client: &http.Client{}, warn: warn}
	switch protocol, name := setting("PROTOCOL"); protocol {
	case "", "http/protobuf":
	case "http/json":
		x.protobuf = false
	default:
		warn(fmt.Sprintf("%s=%s is not supported (use http/protobuf or http/json); traces are not exported", name, protocol))
		return nil
	}
	if v, name := setting("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			warn(fmt.Sprintf("%s=%s is not a number of milliseconds; using %s", name, v, DefaultTimeout))
		} else {
			x.timeout = time.Duration(ms) * time.Millisecond
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, kv := range keyValues(getenv(name), name, warn) {
			x.header.Set(kv.key, kv.value.(string))
		}
	}
	service := "agent"
	for _, kv := range keyValues(getenv("OTEL_RESOURCE_ATTRIBUTES"), "OTEL_RESOURCE_ATTRIBUTES", warn) {
		if kv.key == "service.name" {
			service = kv.value.(string)
			continue
		}
		x.resource = append(x.resource, kv)
	}
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		service = v
	}
	x.resource = append([]attr{{"service.name", service}, {"service.version", version}}, x.resource...)
	return x
}

// keyValues parses OpenTelemetry's list of key=value pairs, comma
// separated, values percent-encoded. A malformed pair is left out.
func keyValues(list, name string, warn func(string)) []attr {
	var out []attr
	for _, pair := range strings.Split(list, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		v, err := url.PathUnescape(strings.TrimSpace(v))
		if !ok || k == "" || err != nil {
			warn(fmt.Sprintf("%s: %q is not key=value; it is left out", name, strings.TrimSpace(pair)))
			continue
		}
		out = append(out, attr{k, v})
	}
	return out
}

// Export sends a run's trace and waits for the collector, at most the
// timeout. A failure is one warning: a trace is never worth a run.
func (x *Exporter) Export(t *Trace) {
	spans := t.finish()
	ctx, cancel := context.WithTimeout(context.Background(), x.timeout)
	defer cancel()
	for len(spans) > 0 {
		n := min(len(spans), maxSpans)
		b := batch{traceID: t.traceID, resource: x.resource, version: x.version, spans: spans[:n]}
		if err := x.send(ctx, b); err != nil {
			x.warn(fmt.Sprintf("the trace of run %s was not exported: %v", t.runID, err))
			return
		}
		spans = spans[n:]
	}
}

// ExportLater exports a trace in the background, for a process that
// drives many runs; Wait waits for the exports under way.
func (x *Exporter) ExportLater(t *Trace) {
	x.later.Add(1)
	go func() {
		defer x.later.Done()
		x.Export(t)
	}()
}

// Wait returns once no export is under way.
func (x *Exporter) Wait() { x.later.Wait() }

func (x *Exporter) send(ctx context.Context, b batch) error {
	body, ctype := b.protobuf(), "application/x-protobuf"
	if !x.protobuf {
		var err error
		if body, err = b.json(); err != nil {
			return err
		}
		ctype = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = x.header.Clone()
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", "agent/"+x.version)
	resp, err := x.client.Do(req)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s did not answer within %s", x.url, x.timeout)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", x.url, resp.Status)
	}
	return nil
}
