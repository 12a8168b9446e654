package telemetry

import (
	"bufio"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
)

// Metrics in Prometheus's text exposition format, version 0.0.4: a few
// families written by hand, where the client library would bring a
// registry, collectors and their dependencies into the binary.

// ContentType is what a scrape's answer says it is.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Types of a metric family.
const (
	Counter   = "counter"
	Gauge     = "gauge"
	Histogram = "histogram"
)

// Family is one metric: its samples share a name, help and type.
type Family struct {
	Name    string
	Help    string
	Type    string
	Samples []Sample
}

// Sample is one value of a family. Suffix is "_bucket", "_sum" or
// "_count" in a histogram, "" elsewhere.
type Sample struct {
	Suffix string
	Labels []Label
	Value  float64
}

// Label is a label of a sample.
type Label struct{ Name, Value string }

// WriteText writes families in the text format.
func WriteText(w io.Writer, families []Family) error {
	bw := bufio.NewWriter(w)
	for _, f := range families {
		bw.WriteString("# HELP " + f.Name + " " + helpEscaper.Replace(f.Help) + "\n")
		bw.WriteString("# TYPE " + f.Name + " " + f.Type + "\n")
		for _, s := range f.Samples {
			bw.WriteString(f.Name + s.Suffix)
			if len(s.Labels) > 0 {
				bw.WriteByte('{')
				for i, l := range s.Labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					bw.WriteString(l.Name + `="` + labelEscaper.Replace(l.Value) + `"`)
				}
				bw.WriteByte('}')
			}
			bw.WriteString(" " + formatValue(s.Value) + "\n")
		}
	}
	return bw.Flush()
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// formatValue writes whole numbers without an exponent, as people read
// them; the format accepts any Go float.
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Buckets counts observations by upper bound, for a histogram family. It
// is safe for concurrent use.
type Buckets struct {
	mu     sync.Mutex
	bounds []float64 // ascending; +Inf is implied
	counts []uint64  // per bound, not cumulative; the last is +Inf's
	sum    float64
}

// NewBuckets counts observations up to each of bounds, ascending.
func NewBuckets(bounds ...float64) *Buckets {
	return &Buckets{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe counts one value.
func (b *Buckets) Observe(v float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := 0
	for i < len(b.bounds) && v > b.bounds[i] {
		i++
	}
	b.counts[i]++
	b.sum += v
}

// Family is the histogram's family: cumulative _bucket samples, +Inf
// last, then _sum and _count.
func (b *Buckets) Family(name, help string) Family {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := Family{Name: name, Help: help, Type: Histogram}
	var total uint64
	for i, n := range b.counts {
		total += n
		le := math.Inf(1)
		if i < len(b.bounds) {
			le = b.bounds[i]
		}
		f.Samples = append(f.Samples, Sample{Suffix: "_bucket", Labels: []Label{{"le", formatValue(le)}}, Value: float64(total)})
	}
	f.Samples = append(f.Samples,
		Sample{Suffix: "_sum", Value: b.sum},
		Sample{Suffix: "_count", Value: float64(total)})
	return f
}
