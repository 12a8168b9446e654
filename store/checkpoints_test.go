package store

import (
	"context"
	"testing"

	"agent/event"
)

func checkpointEvent(path, blob string, existed bool) event.Event {
	return event.New(event.CheckpointCreated, event.CheckpointData{
		Path: path, Blob: blob, Existed: existed, Mode: 0o640, Bytes: 3, CallID: "c-" + path, Tool: "write_file",
	})
}

// TestCheckpointsNumberedPerRun: the projection numbers each run's
// checkpoints 1..n in journal order, whoever records them.
func TestCheckpointsNumberedPerRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	createRun(t, db, "run-2")

	appendSeq(t, db, "run-1", event.New(event.RunStarted, nil), checkpointEvent("a.txt", "aaa", true))
	appendSeq(t, db, "run-2", checkpointEvent("x.txt", "", false))
	// A phase's event carries its phase and attempt.
	phased := checkpointEvent("b.txt", "", false)
	phased.PhaseID, phased.Attempt = "build", 2
	appendSeq(t, db, "run-1", phased, event.New(event.CheckpointCreated, []byte(`"not an object"`)))

	cps, err := db.Checkpoints(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 2 {
		t.Fatalf("run-1 has %d checkpoints, want 2 (unreadable data is not projected): %+v", len(cps), cps)
	}
	a, b := cps[0], cps[1]
	if a.Number != 1 || a.Seq != 2 || a.Path != "a.txt" || a.Blob != "aaa" || !a.Existed || a.Mode != 0o640 ||
		a.Bytes != 3 || a.CallID != "c-a.txt" || a.Tool != "write_file" || a.CreatedAt.IsZero() {
		t.Errorf("checkpoint 1 = %+v", a)
	}
	if b.Number != 2 || b.Seq != 3 || b.Path != "b.txt" || b.Existed || b.PhaseID != "build" || b.Attempt != 2 {
		t.Errorf("checkpoint 2 = %+v", b)
	}
	other, err := db.Checkpoints(ctx, "run-2")
	if err != nil || len(other) != 1 || other[0].Number != 1 {
		t.Errorf("run-2 checkpoints = %+v, %v; want its own number 1", other, err)
	}
	if none, err := db.Checkpoints(ctx, "no-such-run"); err != nil || len(none) != 0 {
		t.Errorf("unknown run: %+v, %v", none, err)
	}
}

func TestLastWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	createRun(t, db, "run-2")
	art := func(path, sum string) event.Event {
		return event.New(event.ArtifactCreated, event.ArtifactData{Path: path, SHA256: sum, Bytes: 1})
	}
	appendSeq(t, db, "run-1", art("a.txt", "a1"), art("b.txt", "b1"), art("a.txt", "a2"))
	appendSeq(t, db, "run-2", art("a.txt", "other run"))

	got, err := db.LastWrites(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a.txt"] != "a2" || got["b.txt"] != "b1" {
		t.Errorf("LastWrites = %v, want a.txt a2 (the last write wins), b.txt b1", got)
	}
	if got, err := db.LastWrites(ctx, "no-such-run"); err != nil || len(got) != 0 {
		t.Errorf("LastWrites of an unknown run = %v, %v", got, err)
	}
}
