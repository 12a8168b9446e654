package supervisor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"agent/event"
	"agent/store"
)

// A child's intent is answered only for a side effect the run has, with
// the receipt type that effect records: a built-in one, or one its MCP
// servers list under effects. Anything else that writes to the child's
// stdout could otherwise make up an intent and a receipt that passes for
// a phase's evidence.
func TestIntentOnlyForTheRunsSideEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := newTest(t)
	cfg := `[mcp_servers.tracker]
command = "tracker-mcp"
[mcp_servers.tracker.effects.create_issue]
receipt = "issue_created"
key_args = ["title"]
[mcp_servers.shell]
command = "shell-mcp"
`
	if err := os.WriteFile(filepath.Join(s.cfg.Home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := createRun(t, s, "notify")
	for _, tt := range []struct {
		tool, receipt string
		why           string // "" for proceed
	}{
		{"send_email", "email_sent", ""},
		{"slack_post", "slack_message_sent", ""},
		{"mcp__tracker__create_issue", "issue_created", ""},
		{"send_email", "issue_created", `send_email does not record "issue_created" receipts`},
		{"bash", "email_sent", `bash does not record "email_sent" receipts`},
		{"mcp__tracker__create_issue", "email_sent", `mcp__tracker__create_issue is not listed under its MCP server's effects with "email_sent" receipts`},
		{"mcp__shell__run", "email_sent", `mcp__shell__run is not listed under its MCP server's effects`},
	} {
		key := tt.tool + "-" + tt.receipt
		c := s.intent(ctx, store.Receipt{Key: key, RunID: r.ID, PhaseID: "notify", Attempt: 1, Tool: tt.tool, Type: tt.receipt,
			Args: json.RawMessage(`{}`)})
		_, err := db.ReceiptByKey(ctx, key)
		switch {
		case tt.why == "" && (!c.Proceed || err != nil):
			t.Errorf("%s with %s receipts: %+v (%v), want it recorded and go ahead", tt.tool, tt.receipt, c, err)
		case tt.why != "" && (c.Proceed || !strings.Contains(c.Reason, "no side effect of this run: "+tt.why)):
			t.Errorf("%s with %s receipts: %+v, want a refusal saying %q", tt.tool, tt.receipt, c, tt.why)
		case tt.why != "" && err == nil:
			t.Errorf("%s with %s receipts: the refused intent is on record", tt.tool, tt.receipt)
		}
	}
}

// A child's effect.unknown marks its intent unknown as it is recorded (the
// store projects it), not only once the attempt ends: whatever comes next,
// the effect is not done, and resume --resend-unknown sends it again.
func TestEffectUnknownMarksTheIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := newTest(t)
	r := createRun(t, s, "notify")
	if c := s.intent(ctx, store.Receipt{Key: "send_email-k", RunID: r.ID, Tool: "send_email", Type: "email_sent",
		Args: json.RawMessage(`{"to":"bob@example.com"}`)}); !c.Proceed {
		t.Fatalf("intent: %+v", c)
	}
	sink := newSink(t, db, r.ID)
	if err := sink.Emit(ctx, event.New(event.EffectUnknown, event.EffectUnknownData{Key: "send_email-k", Error: "connection lost"})); err != nil {
		t.Fatal(err)
	}
	// An unknown effect of no intent on record changes nothing.
	if err := sink.Emit(ctx, event.New(event.EffectUnknown, event.EffectUnknownData{Key: "send_email-never"})); err != nil {
		t.Fatal(err)
	}
	rc, err := db.ReceiptByKey(ctx, "send_email-k")
	if err != nil || rc.State != event.StatusUnknown {
		t.Fatalf("after effect.unknown: %+v %v, want unknown", rc, err)
	}
	if c := s.intent(ctx, store.Receipt{Key: "send_email-k", RunID: r.ID, Tool: "send_email", Type: "email_sent"}); !c.Unknown || c.Proceed {
		t.Errorf("asked again: %+v, want unknown", c)
	}
}
