package config

import (
	"fmt"
	"net/mail"
	"net/url"
	"strings"
)

// Notify is one [[notify]] block (docs/PROTOCOL.md#notifications): the
// events it is for and its one channel.
type Notify struct {
	// On are the events: NotifyWaiting, NotifyCompleted, NotifyFailed,
	// NotifyJobFailed.
	On []string `toml:"on" json:"on,omitempty"`
	// The channel, one of: a command that reads the notification's JSON
	// on stdin; a webhook POSTed JSON (Format "slack": Slack's incoming
	// webhook {"text":…}); an email (SMTP as send_email: AGENT_SMTP_*);
	// a Slack channel (as slack_post: AGENT_SLACK_TOKEN).
	Command      []string `toml:"command" json:"command,omitempty"`
	Webhook      string   `toml:"webhook" json:"webhook,omitempty"`
	Format       string   `toml:"format" json:"format,omitempty"`
	Email        string   `toml:"email" json:"email,omitempty"`
	SlackChannel string   `toml:"slack_channel" json:"slack_channel,omitempty"`
}

// The events a [[notify]] block can be on.
const (
	NotifyWaiting   = "waiting"    // a run waits for a person (approval, question, signal)
	NotifyCompleted = "completed"  // a run completed
	NotifyFailed    = "failed"     // a run failed
	NotifyJobFailed = "job_failed" // a scheduled job failed its last attempt
)

// NotifyEvents are the words on takes.
var NotifyEvents = []string{NotifyWaiting, NotifyCompleted, NotifyFailed, NotifyJobFailed}

// Wants reports whether the block is on event.
func (n Notify) Wants(event string) bool {
	for _, on := range n.On {
		if on == event {
			return true
		}
	}
	return false
}

// Channel says, for people, where the block sends, e.g. "webhook
// https://hooks.slack.com/…": a webhook's path and query are left out,
// since they are often its secret (Slack's are).
func (n Notify) Channel() string {
	switch {
	case len(n.Command) > 0:
		return "command " + strings.Join(n.Command, " ")
	case n.Webhook != "":
		where := "webhook"
		if u, err := url.Parse(n.Webhook); err == nil {
			where += " " + u.Scheme + "://" + u.Host + "/…"
		}
		if n.Format != "" {
			where += " (" + n.Format + ")"
		}
		return where
	case n.Email != "":
		return "email " + n.Email
	}
	return "slack " + n.SlackChannel
}

// checkNotify checks the [[notify]] blocks and public_url, naming the
// key of the first problem.
func (f File) checkNotify() error {
	if f.PublicURL != "" {
		u, err := url.Parse(f.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("public_url %q: want the gateway's address as people reach it, e.g. https://agent.example.com", f.PublicURL)
		}
	}
	for i, n := range f.Notify {
		if err := n.check(); err != nil {
			return fmt.Errorf("notify[%d]: %v", i+1, err)
		}
	}
	return nil
}

func (n Notify) check() error {
	if len(n.On) == 0 {
		return fmt.Errorf("on: say which events, any of %s", strings.Join(NotifyEvents, ", "))
	}
	for _, on := range n.On {
		known := false
		for _, e := range NotifyEvents {
			known = known || on == e
		}
		if !known {
			return fmt.Errorf("on: %q is not an event; want any of %s", on, strings.Join(NotifyEvents, ", "))
		}
	}
	channels := 0
	for _, set := range []bool{len(n.Command) > 0, n.Webhook != "", n.Email != "", n.SlackChannel != ""} {
		if set {
			channels++
		}
	}
	if channels != 1 {
		return fmt.Errorf("give one channel: command, webhook, email or slack_channel")
	}
	switch {
	case len(n.Command) > 0 && strings.TrimSpace(n.Command[0]) == "":
		return fmt.Errorf("command: the program is empty")
	case n.Format != "" && n.Webhook == "":
		return fmt.Errorf("format applies to a webhook only")
	case n.Format != "" && n.Format != "slack":
		return fmt.Errorf("format %q: want \"slack\" (Slack's incoming webhooks), or none for JSON", n.Format)
	case n.Email != "":
		if _, err := mail.ParseAddress(n.Email); err != nil {
			return fmt.Errorf("email %q: %v", n.Email, err)
		}
	case n.SlackChannel != "" && strings.TrimSpace(n.SlackChannel) == "":
		return fmt.Errorf("slack_channel is empty")
	}
	if n.Webhook != "" {
		u, err := url.Parse(n.Webhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("webhook %q: want an http:// or https:// URL", n.Webhook)
		}
	}
	return nil
}
