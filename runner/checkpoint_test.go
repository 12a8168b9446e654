package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/checkpoint"
	"agent/event"
	"agent/runner"
)

// fakeCheckpointer is a runner.Checkpointer built from a function.
type fakeCheckpointer struct {
	SnapshotFunc func(rel, abs string) (event.CheckpointData, bool, error)
}

func (f fakeCheckpointer) Snapshot(_ context.Context, root, rel string) (event.CheckpointData, bool, error) {
	return f.SnapshotFunc(rel, filepath.Join(root, filepath.FromSlash(rel)))
}

// TestRunCheckpointsFirstChangeOfEachFile: a.txt written twice and b.txt
// edited give exactly two checkpoints, each recorded after its call's
// tool.started and while the file is still as it was before the run.
func TestRunCheckpointsFirstChangeOfEachFile(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	if err := os.WriteFile(filepath.Join(root, "b.txt"), []byte("old b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	blobs := checkpoint.Blobs{Dir: filepath.Join(t.TempDir(), "blobs")}
	sink := &recSink{}
	sink.EmitFunc = func(e event.Event) error {
		if e.Type != event.CheckpointCreated {
			return nil
		}
		d := decode[event.CheckpointData](t, e)
		evs := sink.Events()
		if last := evs[len(evs)-1]; last.Type != event.ToolStarted || decode[event.ToolStartedData](t, last).CallID != d.CallID {
			t.Errorf("checkpoint of %s follows %s, want its own tool.started", d.Path, last.Type)
		}
		b, err := os.ReadFile(filepath.Join(root, d.Path))
		switch d.Path {
		case "a.txt":
			if err == nil {
				t.Errorf("a.txt already exists (%q) when its checkpoint is recorded", b)
			}
		case "b.txt":
			if string(b) != "old b\n" {
				t.Errorf("b.txt = %q when its checkpoint is recorded, want the content before the run", b)
			}
		}
		return nil
	}
	model := replies(t,
		calls(tc("w1", "write_file", `{"path":"a.txt","content":"one"}`)),
		calls(tc("w2", "write_file", `{"path":"a.txt","content":"two"}`),
			tc("e1", "edit_file", `{"path":"b.txt","old_string":"old","new_string":"new"}`)),
		final("done"),
	)
	res, err := runner.Run(context.Background(), runner.Config{
		Model: model, Tools: set, Sink: sink, Checkpoints: blobs,
	}, "write a twice, edit b", runner.State{})
	if err != nil || res.Status != event.StatusCompleted {
		t.Fatalf("Run = %+v, %v", res, err)
	}

	cps := sink.Of(event.CheckpointCreated)
	if len(cps) != 2 {
		t.Fatalf("%d checkpoints, want 2 (a.txt once, b.txt once)", len(cps))
	}
	a := decode[event.CheckpointData](t, cps[0])
	if a.Path != "a.txt" || a.Existed || a.Blob != "" || a.CallID != "w1" || a.Tool != "write_file" {
		t.Errorf("a.txt checkpoint = %+v, want did not exist, call w1", a)
	}
	b := decode[event.CheckpointData](t, cps[1])
	if b.Path != "b.txt" || !b.Existed || b.Mode != 0o600 || b.Bytes != 6 || b.CallID != "e1" {
		t.Errorf("b.txt checkpoint = %+v", b)
	}
	if saved, err := blobs.Get(b.Blob); err != nil || string(saved) != "old b\n" {
		t.Errorf("saved b.txt = %q, %v", saved, err)
	}
	if got := readFile(t, filepath.Join(root, "b.txt")); got != "new b\n" {
		t.Errorf("b.txt = %q: the edit did not run", got)
	}
}

// TestRunCheckpointedStateSuppressesSnapshots: a resumed run does not save
// again a file it already saved before the crash.
func TestRunCheckpointedStateSuppressesSnapshots(t *testing.T) {
	t.Parallel()
	set, _ := newTools(t)
	var saved []string
	cp := fakeCheckpointer{SnapshotFunc: func(rel, abs string) (event.CheckpointData, bool, error) {
		saved = append(saved, rel)
		return event.CheckpointData{Path: rel}, true, nil
	}}
	sink := &recSink{}
	model := replies(t,
		calls(tc("w1", "write_file", `{"path":"a.txt","content":"a"}`),
			tc("w2", "write_file", `{"path":"b.txt","content":"b"}`),
			tc("r1", "read_file", `{"path":"a.txt"}`),
			tc("s1", "bash", bashArgs("echo c > c.txt"))),
		final("done"),
	)
	_, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, Checkpoints: cp},
		"write", runner.State{Checkpointed: []string{"a.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(saved) != 1 || saved[0] != "b.txt" || len(sink.Of(event.CheckpointCreated)) != 1 {
		t.Errorf("saved %v with %d events, want only b.txt", saved, len(sink.Of(event.CheckpointCreated)))
	}
}

// TestRunCheckpointFailureRefusesTheCall: a file that cannot be saved is
// not changed, and the model is told why.
func TestRunCheckpointFailureRefusesTheCall(t *testing.T) {
	t.Parallel()
	set, root := newTools(t)
	cp := fakeCheckpointer{SnapshotFunc: func(rel, abs string) (event.CheckpointData, bool, error) {
		return event.CheckpointData{}, false, errors.New("disk full")
	}}
	sink := &recSink{}
	model := replies(t, calls(tc("w1", "write_file", `{"path":"a.txt","content":"a"}`)), final("gave up"))
	if _, err := runner.Run(context.Background(), runner.Config{Model: model, Tools: set, Sink: sink, Checkpoints: cp},
		"write", runner.State{}); err != nil {
		t.Fatal(err)
	}
	if fileExists(filepath.Join(root, "a.txt")) {
		t.Error("a.txt was written although it could not be checkpointed")
	}
	r := toolResults(t, sink)["w1"]
	if r.OK || r.Error == "" || !strings.Contains(r.Output, "disk full") {
		t.Errorf("result = %+v, want an error naming the cause", r)
	}
}
