package telemetry

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
)

// An OTLP ExportTraceServiceRequest (opentelemetry-proto, trace/v1), in
// its two encodings over HTTP: protobuf and the JSON mapping of it. Both
// are written here rather than with the OpenTelemetry SDK, which would
// add megabytes to the binary for the few messages a trace needs.

// batch is one request's worth: the spans of one trace and who sent them.
type batch struct {
	traceID  [16]byte
	resource []attr
	version  string // of the instrumentation scope, agent's
	spans    []*span
}

// scopeName names the instrumentation scope: this program.
const scopeName = "agent"

// The JSON mapping: ids in hex, 64-bit integers as strings, enums as
// numbers (OTLP specification, "JSON Protobuf Encoding").
type (
	jsonRequest struct {
		ResourceSpans []jsonResourceSpans `json:"resourceSpans"`
	}
	jsonResourceSpans struct {
		Resource   jsonResource     `json:"resource"`
		ScopeSpans []jsonScopeSpans `json:"scopeSpans"`
	}
	jsonResource struct {
		Attributes []jsonKeyValue `json:"attributes"`
	}
	jsonScopeSpans struct {
		Scope jsonScope  `json:"scope"`
		Spans []jsonSpan `json:"spans"`
	}
	jsonScope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	jsonSpan struct {
		TraceID      string         `json:"traceId"`
		SpanID       string         `json:"spanId"`
		ParentSpanID string         `json:"parentSpanId,omitempty"`
		Name         string         `json:"name"`
		Kind         int            `json:"kind"`
		Start        string         `json:"startTimeUnixNano"`
		End          string         `json:"endTimeUnixNano"`
		Attributes   []jsonKeyValue `json:"attributes,omitempty"`
		Status       *jsonStatus    `json:"status,omitempty"`
	}
	jsonKeyValue struct {
		Key   string       `json:"key"`
		Value jsonAnyValue `json:"value"`
	}
	jsonAnyValue struct {
		String *string  `json:"stringValue,omitempty"`
		Bool   *bool    `json:"boolValue,omitempty"`
		Int    *string  `json:"intValue,omitempty"`
		Double *float64 `json:"doubleValue,omitempty"`
	}
	jsonStatus struct {
		Message string `json:"message,omitempty"`
		Code    int    `json:"code"`
	}
)

func (b batch) json() ([]byte, error) {
	traceID := hex.EncodeToString(b.traceID[:])
	spans := make([]jsonSpan, 0, len(b.spans))
	for _, s := range b.spans {
		js := jsonSpan{
			TraceID: traceID, SpanID: spanID(s.id), Name: s.name, Kind: s.kind,
			Start: strconv.FormatInt(s.start.UnixNano(), 10), End: strconv.FormatInt(s.end.UnixNano(), 10),
			Attributes: jsonAttrs(s.attrs),
		}
		if s.parent != 0 {
			js.ParentSpanID = spanID(s.parent)
		}
		if s.status != 0 {
			js.Status = &jsonStatus{Message: s.message, Code: s.status}
		}
		spans = append(spans, js)
	}
	return json.Marshal(jsonRequest{ResourceSpans: []jsonResourceSpans{{
		Resource:   jsonResource{Attributes: jsonAttrs(b.resource)},
		ScopeSpans: []jsonScopeSpans{{Scope: jsonScope{Name: scopeName, Version: b.version}, Spans: spans}},
	}}})
}

func spanID(id uint64) string {
	return hex.EncodeToString(binary.BigEndian.AppendUint64(nil, id))
}

func jsonAttrs(attrs []attr) []jsonKeyValue {
	out := make([]jsonKeyValue, 0, len(attrs))
	for _, a := range attrs {
		var v jsonAnyValue
		switch x := a.value.(type) {
		case string:
			v.String = &x
		case bool:
			v.Bool = &x
		case int64:
			n := strconv.FormatInt(x, 10)
			v.Int = &n
		case float64:
			v.Double = &x
		}
		out = append(out, jsonKeyValue{Key: a.key, Value: v})
	}
	return out
}

// Protobuf: field numbers of opentelemetry-proto's messages, and the wire
// types they use.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
)

func (b batch) protobuf() []byte {
	var spans []byte
	for _, s := range b.spans {
		spans = appendBytes(spans, 2, encodeSpan(b.traceID, s)) // ScopeSpans.spans
	}
	var scope []byte
	scope = appendString(scope, 1, scopeName) // InstrumentationScope.name
	scope = appendString(scope, 2, b.version) // .version
	var scopeSpans []byte
	scopeSpans = appendBytes(scopeSpans, 1, scope) // ScopeSpans.scope
	scopeSpans = append(scopeSpans, spans...)
	var resource []byte
	for _, a := range b.resource {
		resource = appendBytes(resource, 1, encodeAttr(a)) // Resource.attributes
	}
	var rs []byte
	rs = appendBytes(rs, 1, resource)   // ResourceSpans.resource
	rs = appendBytes(rs, 2, scopeSpans) // .scope_spans
	return appendBytes(nil, 1, rs)      // ExportTraceServiceRequest.resource_spans
}

func encodeSpan(traceID [16]byte, s *span) []byte {
	var out []byte
	out = appendBytes(out, 1, traceID[:])                               // trace_id
	out = appendBytes(out, 2, binary.BigEndian.AppendUint64(nil, s.id)) // span_id
	if s.parent != 0 {
		out = appendBytes(out, 4, binary.BigEndian.AppendUint64(nil, s.parent)) // parent_span_id
	}
	out = appendString(out, 5, s.name)                      // name
	out = appendVarint(out, 6, uint64(s.kind))              // kind
	out = appendFixed64(out, 7, uint64(s.start.UnixNano())) // start_time_unix_nano
	out = appendFixed64(out, 8, uint64(s.end.UnixNano()))   // end_time_unix_nano
	for _, a := range s.attrs {
		out = appendBytes(out, 9, encodeAttr(a)) // attributes
	}
	if s.status != 0 {
		var st []byte
		st = appendString(st, 2, s.message)        // Status.message
		st = appendVarint(st, 3, uint64(s.status)) // Status.code
		out = appendBytes(out, 15, st)             // status
	}
	return out
}

// encodeAttr is a KeyValue. A oneof's field is written even when it holds
// its zero value: that it is there is what says which one it is.
func encodeAttr(a attr) []byte {
	var v []byte
	switch x := a.value.(type) {
	case string:
		v = appendBytes(v, 1, []byte(x)) // AnyValue.string_value
	case bool:
		n := uint64(0)
		if x {
			n = 1
		}
		v = appendKey(v, 2, wireVarint) // .bool_value
		v = binary.AppendUvarint(v, n)
	case int64:
		v = appendKey(v, 3, wireVarint) // .int_value
		v = binary.AppendUvarint(v, uint64(x))
	case float64:
		v = appendKey(v, 4, wireFixed64) // .double_value
		v = binary.LittleEndian.AppendUint64(v, math.Float64bits(x))
	}
	var kv []byte
	kv = appendString(kv, 1, a.key) // KeyValue.key
	return appendBytes(kv, 2, v)    // .value
}

func appendKey(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

func appendBytes(b []byte, field int, data []byte) []byte {
	b = appendKey(b, field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// appendString, appendVarint and appendFixed64 leave out a zero value,
// as proto3 does.
func appendString(b []byte, field int, s string) []byte {
	if s == "" {
		return b
	}
	return appendBytes(b, field, []byte(s))
}

func appendVarint(b []byte, field int, n uint64) []byte {
	if n == 0 {
		return b
	}
	return binary.AppendUvarint(appendKey(b, field, wireVarint), n)
}

func appendFixed64(b []byte, field int, n uint64) []byte {
	if n == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(appendKey(b, field, wireFixed64), n)
}
