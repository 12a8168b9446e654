package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"agent/event"
)

func TestCreateAndGetRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now

	r := &Run{
		ID:                "0b6f2c8e-run",
		Kind:              KindHarness,
		SessionID:         "sess-1",
		Prompt:            "write a poem",
		Workspace:         "/tmp/ws",
		Model:             "gpt-test",
		Config:            json.RawMessage(`{"max_turns":5}`),
		MaxIterations:     3,
		CompletionPromise: "DONE",
	}
	if err := db.CreateRun(ctx, r, "host/1/aaaa", time.Minute); err != nil {
		t.Fatal(err)
	}
	if r.Status != event.StatusRunning || !r.CreatedAt.Equal(clock.Now()) {
		t.Errorf("CreateRun set status %q created %v", r.Status, r.CreatedAt)
	}

	got, err := db.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := *r
	want.LeaseExpiresAt = clock.Now().Add(time.Minute)
	want.LeaseHeartbeatAt = clock.Now()
	if got.ID != want.ID || got.Kind != want.Kind || got.SessionID != want.SessionID ||
		got.Status != want.Status || got.Prompt != want.Prompt || got.Workspace != want.Workspace ||
		got.Model != want.Model || string(got.Config) != string(want.Config) ||
		got.MaxIterations != 3 || got.CompletionPromise != "DONE" ||
		got.LeaseOwner != "host/1/aaaa" || !got.LeaseExpiresAt.Equal(want.LeaseExpiresAt) ||
		!got.LeaseHeartbeatAt.Equal(want.LeaseHeartbeatAt) ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.CreatedAt) ||
		!got.FinishedAt.IsZero() {
		t.Errorf("GetRun = %+v\nwant %+v", got, want)
	}

	if err := db.CreateRun(ctx, &Run{ID: r.ID}, "", 0); err == nil {
		t.Error("CreateRun with a duplicate id succeeded")
	}
	if err := db.CreateRun(ctx, &Run{}, "", 0); err == nil {
		t.Error("CreateRun with an empty id succeeded")
	}
}

func TestGetRunPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	for _, id := range []string{"abcd1111-one", "abcd2222-two", "ffff0000-three", "abc"} {
		createRun(t, db, id)
	}

	tests := []struct {
		id      string
		want    string
		wantErr error
	}{
		{id: "abcd1111-one", want: "abcd1111-one"},
		{id: "abcd1", want: "abcd1111-one"},
		{id: "ffff", want: "ffff0000-three"},
		{id: "abc", want: "abc"}, // an exact match wins over the prefix it also is
		{id: "fff", want: "ffff0000-three"},
		{id: "f", want: "ffff0000-three"}, // any unique prefix, however short
		{id: "a", wantErr: ErrAmbiguous},
		{id: "abcd", wantErr: ErrAmbiguous},
		{id: "e", wantErr: ErrNotFound},
		{id: "ABCD1", wantErr: ErrNotFound},
		{id: "zzzzzzzz", wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			got, err := db.GetRun(ctx, tt.id)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("GetRun(%q) err = %v, want %v", tt.id, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.id) {
					t.Errorf("error %q does not name %q", err, tt.id)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want {
				t.Errorf("GetRun(%q) = %s, want %s", tt.id, got.ID, tt.want)
			}
		})
	}

	_, err := db.GetRun(ctx, "abcd")
	if err == nil || !strings.Contains(err.Error(), "abcd1111-one") || !strings.Contains(err.Error(), "abcd2222-two") {
		t.Errorf("ambiguous error %v does not list the matches", err)
	}
	// An ambiguous prefix says how many match and names a few.
	_, err = db.GetRun(ctx, "a")
	if err == nil || !strings.Contains(err.Error(), "3 runs match (abc, abcd1111-one, abcd2222-two)") {
		t.Errorf("ambiguous error %v does not count and list the matches", err)
	}
	for i := range 7 {
		createRun(t, db, fmt.Sprintf("beef%d", i))
	}
	_, err = db.GetRun(ctx, "b")
	if err == nil || !strings.Contains(err.Error(), "7 runs match (beef0, beef1, beef2, beef3, beef4, …)") {
		t.Errorf("ambiguous error %v does not count the matches or cut the list", err)
	}
	if _, err := db.GetRun(ctx, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetRun(\"\") err = %v, want ErrNotFound", err)
	}
}

func TestListRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		createRun(t, db, id)
		clock.Advance(time.Second)
	}

	tests := []struct {
		limit int
		want  []string
	}{
		{limit: 0, want: []string{"run-c", "run-b", "run-a"}},
		{limit: 2, want: []string{"run-c", "run-b"}},
	}
	for _, tt := range tests {
		runs, err := db.ListRuns(ctx, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		if strings.Join(ids, ",") != strings.Join(tt.want, ",") {
			t.Errorf("ListRuns(%d) = %v, want %v", tt.limit, ids, tt.want)
		}
	}
}

func TestSetRunStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	createRun(t, db, "run-1")
	appendSeq(t, db, "run-1", event.New(event.RunInterrupted, event.RunFinishedData{
		Status: "interrupted", Result: "partial", Reason: "signal", ExitCode: 130,
	}))

	if err := db.SetRunStatus(ctx, "run-1", event.StatusRunning); err != nil {
		t.Fatal(err)
	}
	r, err := db.GetRun(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != event.StatusRunning || r.Result != "" || r.Reason != "" || r.ExitCode != 0 || !r.FinishedAt.IsZero() {
		t.Errorf("after resume: %+v", r)
	}

	if err := db.SetRunStatus(ctx, "run-1", "bogus"); err == nil {
		t.Error("SetRunStatus accepted an invalid status")
	}
	if err := db.SetRunStatus(ctx, "missing", event.StatusFailed); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetRunStatus on a missing run: err = %v, want ErrNotFound", err)
	}
}
