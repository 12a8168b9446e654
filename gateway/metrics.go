package gateway

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"agent/event"
	"agent/telemetry"
)

// GET /metrics (docs/PROTOCOL.md#metrics), Prometheus's text format, behind the
// API's auth. What the store holds is read at each scrape, so it survives
// restarts and every gateway of a shared database says the same: runs by
// status, tokens, tool calls, the workers' queue, job runs. Only how long
// model calls take is not in a row: it is counted from the events this
// gateway persists or relays, so since it started and of the sessions it
// serves (with workers, the ones its clients follow).

// modelBuckets are the upper bounds, in seconds, of the model latency
// histogram: a model call takes from a fraction of a second to minutes.
var modelBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}

// metrics is what the gateway counts itself.
type metrics struct {
	modelLatency *telemetry.Buckets
}

func newMetrics() *metrics {
	return &metrics{modelLatency: telemetry.NewBuckets(modelBuckets...)}
}

// observe counts a persisted event: a model call's latency, from the
// assistant message it answered with. A fork's copied messages have no
// usage: no model was called for them.
func (m *metrics) observe(e event.Event) {
	if e.Type != event.MessageCompleted {
		return
	}
	var d struct {
		Role       string       `json:"role"`
		Usage      *event.Usage `json:"usage"`
		DurationMS int64        `json:"duration_ms"`
	}
	if json.Unmarshal(e.Data, &d) != nil || d.Role != "assistant" || d.Usage == nil {
		return
	}
	m.modelLatency.Observe(float64(d.DurationMS) / 1000)
}

// Statuses every scrape reports, zero or not, so that a series exists
// before its first run.
var (
	runStatuses = []string{event.StatusRunning, event.StatusQueued, event.StatusWaiting, event.StatusCompleted, event.StatusFailed,
		event.StatusInterrupted, event.StatusPlanned, event.StatusCancelled}
	jobRunStatuses = []string{event.StatusQueued, event.StatusRunning, event.StatusCompleted, event.StatusFailed,
		event.StatusCancelled, event.StatusSkipped}
)

func (s *Server) httpMetrics(w http.ResponseWriter, r *http.Request) {
	st, err := s.db.Stats(r.Context())
	if err != nil {
		s.writeErr(w, err)
		return
	}
	waiting, running := s.queue.counts()
	calls := telemetry.Family{Name: "agent_tool_calls_total", Type: telemetry.Counter,
		Help: "Tool calls that returned, by tool and outcome (ok or error), over every run in the store."}
	for _, c := range st.ToolCalls {
		outcome := "ok"
		if !c.OK {
			outcome = "error"
		}
		calls.Samples = append(calls.Samples, sample(float64(c.Count), "tool", c.Tool, "outcome", outcome))
	}
	families := []telemetry.Family{
		byStatus("agent_runs", "Runs in the store by status; queued ones wait for a worker, waiting ones for a person or a time.", runStatuses, st.Runs),
		{Name: "agent_tokens_total", Type: telemetry.Counter, Help: "Tokens the model reported, over every run in the store.",
			Samples: []telemetry.Sample{
				sample(float64(st.PromptTokens), "type", "prompt"),
				sample(float64(st.CompletionTokens), "type", "completion"),
			}},
		calls,
		s.metrics.modelLatency.Family("agent_model_call_duration_seconds",
			"How long model calls took, the client's retries included: those of the runs this gateway drove or relayed since it started."),
		{Name: "agent_queue_depth", Type: telemetry.Gauge,
			Help: "Runs waiting to start: in the store for a worker (agent worker), or in this gateway's own queue.",
			Samples: []telemetry.Sample{
				sample(float64(st.Runs[event.StatusQueued]), "queue", "workers"),
				sample(float64(waiting), "queue", "gateway"),
			}},
		{Name: "agent_gateway_runs_running", Type: telemetry.Gauge, Help: "Runs this gateway is driving.",
			Samples: []telemetry.Sample{{Value: float64(running)}}},
		byStatus("agent_job_runs", "Attempts of scheduled jobs' ticks in the store, by status.", jobRunStatuses, st.JobRuns),
	}
	w.Header().Set("Content-Type", telemetry.ContentType)
	_ = telemetry.WriteText(w, families)
}

// byStatus is a gauge with a sample per status: the known ones first,
// zero or not, then any other the store has.
func byStatus(name, help string, known []string, counts map[string]int64) telemetry.Family {
	f := telemetry.Family{Name: name, Help: help, Type: telemetry.Gauge}
	seen := map[string]bool{}
	for _, status := range known {
		seen[status] = true
		f.Samples = append(f.Samples, sample(float64(counts[status]), "status", status))
	}
	for _, status := range slices.Sorted(maps.Keys(counts)) {
		if !seen[status] {
			f.Samples = append(f.Samples, sample(float64(counts[status]), "status", status))
		}
	}
	return f
}

// sample is a value with labels given as name, value, name, value….
func sample(v float64, labels ...string) telemetry.Sample {
	s := telemetry.Sample{Value: v}
	for i := 0; i+1 < len(labels); i += 2 {
		s.Labels = append(s.Labels, telemetry.Label{Name: labels[i], Value: labels[i+1]})
	}
	return s
}
