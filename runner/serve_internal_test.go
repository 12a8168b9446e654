package runner

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"agent/adapter"
	"agent/checkpoint"
	"agent/event"
)

// A tool.completed too large for a line (an image read_file read) goes to
// the parent through the blob store, and still closes its call: the
// events after it carry no token of it.
func TestChildSinkClosesACallWhoseResultGoesThroughTheBlobStore(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := &childSink{enc: event.NewEncoder(&out), spec: adapter.PhaseSpec{RunID: "r"}, intents: &adapter.Intents{},
		blobs: checkpoint.BlobsIn(t.TempDir()), calls: map[string]string{"c1": "tok"}, last: "c1"}
	big := event.New(event.ToolCompleted, event.ToolCompletedData{CallID: "c1", OK: true,
		Images: []event.Image{{Name: "big.png", Data: bytes.Repeat([]byte{1}, blobAbove)}}})
	if err := s.Emit(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"blob":"`) {
		t.Fatalf("the result went on a line of %d bytes", out.Len())
	}
	if call := s.openCall(); call != "" || len(s.calls) != 0 {
		t.Errorf("call %q (open %v) is still open after its result", call, s.calls)
	}
}
