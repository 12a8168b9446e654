package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"agent/config"
	"agent/event"
	"agent/tools"
)

// Each channel says what happened as a side effect does (tools/effect.go):
// nil and the receipt's details when it was delivered; an error wrapped
// by tools.NotSent when it certainly was not, so it may be tried again;
// any other error when it may or may not have been, so it is not.

// deliver sends m to the channel ch.
func (n *Notifier) deliver(ctx context.Context, ch config.Notify, m Message) (json.RawMessage, error) {
	switch {
	case len(ch.Command) > 0:
		return runCommand(ctx, ch.Command, m)
	case ch.Webhook != "":
		return n.post(ctx, ch, m)
	case ch.Email != "":
		args := mustJSON(map[string]string{"to": ch.Email, "subject": m.Subject(), "body": m.Body()})
		return effect(tools.ResendEffect(ctx, "send_email", m.Key, args, n.cfg.Getenv, n.cfg.Effects))
	case ch.SlackChannel != "":
		args := mustJSON(map[string]string{"channel": ch.SlackChannel, "text": m.Body()})
		return effect(tools.ResendEffect(ctx, "slack_post", m.Key, args, n.cfg.Getenv, n.cfg.Effects))
	}
	return nil, tools.NotSent(errors.New("the [[notify]] block names no channel"))
}

// effect reads the outcome of send_email's or slack_post's performer.
func effect(res tools.Result) (json.RawMessage, error) {
	for _, e := range res.Events {
		switch e.Type {
		case event.ReceiptRecorded:
			var d event.ReceiptData
			if err := e.Decode(&d); err != nil {
				return nil, err // it was sent; its receipt is unreadable
			}
			return d.Details, nil
		case event.EffectUnknown:
			return nil, errors.New(res.Output)
		}
	}
	// effect.failed, or refused before it was tried (not configured).
	return nil, tools.NotSent(errors.New(strings.TrimPrefix(res.Output, "not sent: ")))
}

// commandOutput is how much of a command's output a failure quotes.
const commandOutput = 2 << 10

// runCommand runs argv with m's JSON on its stdin and AGENT_NOTIFY_KEY
// set to its key. Exit 0 is delivered; a command that could not start or
// exited non-zero is tried again (it must be safe to repeat: the key
// tells a repeat); one stopped at the timeout may have done its work.
func runCommand(ctx context.Context, argv []string, m Message) (json.RawMessage, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(append(mustJSON(m), '\n'))
	cmd.Env = append(os.Environ(), "AGENT_NOTIFY_KEY="+m.Key)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limited{&out, commandOutput}, &limited{&out, commandOutput}
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return mustJSON(map[string]int{"exit_code": 0}), nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s stopped at the timeout: %w", argv[0], ctx.Err())
	case errors.As(err, &exit):
		return nil, tools.NotSent(fmt.Errorf("%s exited %d: %s", argv[0], exit.ExitCode(), strings.TrimSpace(out.String())))
	}
	return nil, tools.NotSent(fmt.Errorf("run %s: %w", argv[0], err))
}

// limited keeps the first n bytes written to it and drops the rest.
type limited struct {
	buf *bytes.Buffer
	n   int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// post sends m to a webhook: its JSON, or Slack's {"text": …} with
// format "slack". The key goes in Idempotency-Key. Until the request is
// written the receiver cannot have it; after, only a status other than
// 2xx says it was not taken.
func (n *Notifier) post(ctx context.Context, ch config.Notify, m Message) (json.RawMessage, error) {
	body := mustJSON(m)
	if ch.Format == "slack" {
		body = mustJSON(map[string]string{"text": m.Body()})
	}
	var written atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			written.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, ch.Webhook, bytes.NewReader(body))
	if err != nil {
		return nil, tools.NotSent(fmt.Errorf("webhook request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Idempotency-Key", m.Key)
	req.Header.Set("User-Agent", "agent-notify")
	resp, err := n.http.Do(req)
	if err != nil {
		if written.Load() {
			return nil, fmt.Errorf("no answer from the webhook after the notification was sent: %w", err)
		}
		return nil, tools.NotSent(fmt.Errorf("post to the webhook: %w", err))
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, commandOutput))
	if resp.StatusCode/100 != 2 {
		return nil, tools.NotSent(fmt.Errorf("the webhook answered %s: %s", resp.Status, strings.TrimSpace(string(reply))))
	}
	return mustJSON(map[string]int{"status": resp.StatusCode}), nil
}
