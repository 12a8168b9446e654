package supervisor

import (
	"context"
	"fmt"
	"os"

	"agent/event"
	"agent/store"
	"agent/telemetry"
)

// Traces (README.md#metrics-and-traces): with OTEL_EXPORTER_OTLP_ENDPOINT set, Drive
// hands every event it persisted for a run to the run's trace, and exports
// the trace once the run has ended. Unset, nothing is wrapped: the event
// path costs one nil check per drive.

// tracesFromEnv reads the OTEL_* variables of the runs' environment. Its
// warnings go to the log, or to stderr in a process that has none (the
// CLI).
func (s *Supervisor) tracesFromEnv(logged bool) *telemetry.Exporter {
	warn := func(msg string) { fmt.Fprintln(os.Stderr, "warning: "+msg) }
	if logged {
		warn = func(msg string) { s.log.Warn(msg) }
	}
	return telemetry.FromEnv(s.Getenv, s.cfg.Version, warn)
}

// traced wraps a drive's sink so that its run's trace sees each event
// once it is persisted; it returns nil for the trace when traces are off.
func (s *Supervisor) traced(r *store.Run, sink Sink) (Sink, *telemetry.Trace) {
	if s.traces == nil {
		return sink, nil
	}
	t := telemetry.NewTrace(r.ID, r.SessionID, r.Kind)
	return &tracedSink{Sink: sink, trace: t}, t
}

// traceOf is the trace a drive's sink feeds; nil when traces are off.
func traceOf(sink Sink) *telemetry.Trace {
	if w, ok := sink.(*watchedSink); ok {
		sink = w.Sink
	}
	if t, ok := sink.(*tracedSink); ok {
		return t.trace
	}
	return nil
}

// tracedSink adds each event it persisted to a run's trace.
type tracedSink struct {
	Sink
	trace *telemetry.Trace
}

func (k *tracedSink) Emit(ctx context.Context, e event.Event) error {
	if err := k.Sink.Emit(ctx, e); err != nil {
		return err
	}
	k.trace.Observe(e)
	return nil
}

// export sends a drive's trace: before Drive returns, or after it with
// Config.BackgroundExport.
func (s *Supervisor) export(t *telemetry.Trace) {
	switch {
	case t == nil:
	case s.cfg.BackgroundExport:
		s.traces.ExportLater(t)
	default:
		s.traces.Export(t)
	}
}

// WaitExports returns once no trace is being exported in the background.
func (s *Supervisor) WaitExports() {
	if s.traces != nil {
		s.traces.Wait()
	}
}
