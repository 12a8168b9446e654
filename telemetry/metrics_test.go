package telemetry

import (
	"strings"
	"testing"
)

// TestWriteText: HELP and TYPE lines, escaped help and label values,
// whole numbers without exponents, and a histogram's cumulative buckets
// ending in +Inf, then _sum and _count.
func TestWriteText(t *testing.T) {
	t.Parallel()
	h := NewBuckets(0.5, 1, 2.5)
	for _, v := range []float64{0.1, 0.5, 0.7, 3, 100} {
		h.Observe(v)
	}
	var b strings.Builder
	err := WriteText(&b, []Family{
		{Name: "agent_runs", Help: "Runs by status.", Type: Gauge, Samples: []Sample{
			{Labels: []Label{{"status", "running"}}, Value: 2},
			{Labels: []Label{{"status", `odd "one"` + "\n" + `\`}}, Value: 0},
		}},
		{Name: "agent_tokens_total", Help: `Tokens\counted` + "\nover runs.", Type: Counter, Samples: []Sample{
			{Labels: []Label{{"type", "prompt"}}, Value: 12345678},
			{Labels: []Label{{"type", "completion"}, {"model", "m"}}, Value: 0.25},
		}},
		h.Family("agent_model_call_duration_seconds", "Model latency."),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `# HELP agent_runs Runs by status.
# TYPE agent_runs gauge
agent_runs{status="running"} 2
agent_runs{status="odd \"one\"\n\\"} 0
# HELP agent_tokens_total Tokens\\counted\nover runs.
# TYPE agent_tokens_total counter
agent_tokens_total{type="prompt"} 12345678
agent_tokens_total{type="completion",model="m"} 0.25
# HELP agent_model_call_duration_seconds Model latency.
# TYPE agent_model_call_duration_seconds histogram
agent_model_call_duration_seconds_bucket{le="0.5"} 2
agent_model_call_duration_seconds_bucket{le="1"} 3
agent_model_call_duration_seconds_bucket{le="2.5"} 3
agent_model_call_duration_seconds_bucket{le="+Inf"} 5
agent_model_call_duration_seconds_sum 104.3
agent_model_call_duration_seconds_count 5
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
