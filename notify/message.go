package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"agent/event"
	"agent/store"
)

// Message is what a channel is told (docs/PROTOCOL.md#notifications): a
// command reads it on stdin and a webhook gets it as its JSON body; an
// email and Slack get its Text and Link.
type Message struct {
	// Notification is the event it tells: waiting, completed, failed or
	// job_failed.
	Notification string `json:"notification"`
	// Key is the same for every try of this notification, and differs
	// between any two: a receiver may drop a duplicate by it.
	Key       string `json:"key"`
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id,omitempty"`
	// Text says it for people, in a line or two.
	Text string `json:"text"`
	// Link decides the wait, once, without signing in (public_url).
	Link string `json:"link,omitempty"`
	// Event is the run event it is about, as `agent run --json` prints
	// it (a job's failure: its job.failed event).
	Event json.RawMessage `json:"event,omitempty"`
}

// Subject is the message's first line, short: an email's subject.
func (m Message) Subject() string {
	line, _, _ := strings.Cut(m.Text, "\n")
	return clip(line, 120)
}

// Body is the text with its link, for an email or a chat message.
func (m Message) Body() string {
	if m.Link == "" {
		return m.Text
	}
	return m.Text + "\n\nDecide: " + m.Link + "\n(the link works once, until the wait's deadline)"
}

// waitingText says what a parked run waits for and how to answer.
func waitingText(r *store.Run, w event.RunWaitingData, how string) string {
	var what string
	switch w.Kind {
	case event.WaitApproval:
		what = fmt.Sprintf("waits for your approval of %s %s", w.Tool, clip(string(w.Args), 300))
	case event.WaitQuestion:
		what = "asks: " + clip(w.Question, 500)
		if len(w.Options) > 0 {
			what += " (" + strings.Join(w.Options, ", ") + ")"
		}
	case event.WaitSignal:
		what = fmt.Sprintf("waits for the signal %q", w.Name)
	}
	text := fmt.Sprintf("agent run %s %s, until %s.\nTask: %s", short(r.ID), what, w.Until, clip(r.Prompt, 200))
	if how != "" {
		text += "\nAnswer: " + how
	}
	return text
}

// endText says how a run ended.
func endText(r *store.Run, fin event.RunFinishedData) string {
	var text string
	if fin.Status == event.StatusCompleted {
		text = fmt.Sprintf("agent run %s completed: %s", short(r.ID), clip(fin.Result, 300))
	} else {
		text = fmt.Sprintf("agent run %s failed (%s): %s", short(r.ID), fin.Reason, clip(fin.Detail, 300))
	}
	return text + "\nTask: " + clip(r.Prompt, 200)
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// clip shortens s to n bytes at most, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
