// Package notify tells people about runs (docs/PROTOCOL.md#notifications):
// a run that waits for a person, completes or fails, and a scheduled job
// that failed, each told once to every [[notify]] channel of config.toml
// that is on that event. A notification goes through an outbox of its own
// (store/notifications.go) with a send_email's rules: its intent is stored
// before it is sent and its receipt after, a failure is retried with
// backoff for up to a day, and one whose outcome was lost is never sent
// again unless a person asks. A notification about a wait carries a
// one-decision link when config.toml sets public_url.
//
// The supervisor plans a drive's notifications when it ends (Ended), so
// every front-end has them; the process that drove the run sends them,
// and a gateway retries what is due (Run).
package notify

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"agent/config"
	"agent/event"
	"agent/store"
	"agent/tools"
)

// Defaults of Config.
const (
	DefaultTimeout = 30 * time.Second
	DefaultBackoff = 30 * time.Second
	DefaultGiveUp  = 24 * time.Hour
	DefaultPoll    = 30 * time.Second
	maxBackoff     = time.Hour
	// parallel is how many notifications one Deliver sends at once, so
	// that one slow channel does not hold the others.
	parallel = 8
)

// Config is what a Notifier needs. Zero values take the defaults.
type Config struct {
	DB *store.DB
	// Home is AGENT_HOME, whose config.toml has the [[notify]] blocks
	// and public_url. They are read when a notification is planned or
	// sent, so a running gateway follows the file.
	Home string
	// Getenv reads the SMTP and Slack settings, as send_email and
	// slack_post do (AGENT_SMTP_*, AGENT_SLACK_*).
	Getenv  func(string) string
	Effects tools.EffectOptions // tests: the SMTP server's TLS roots
	// Record records an event of a run outside any drive: the warning
	// that a notification failed. Nil: failures are logged only.
	Record func(ctx context.Context, runID string, e event.Event) error
	// HowToAnswer says how a person answers a wait from a terminal.
	HowToAnswer func(runID string, w event.RunWaitingData) string
	// Timeout bounds one try; Backoff is the delay before the first
	// retry, doubled after each (at most an hour), until GiveUp after
	// the notification was planned; Poll is how often Run looks for
	// what other processes planned.
	Timeout, Backoff, GiveUp, Poll time.Duration
	Logger                         *slog.Logger
	HTTPClient                     *http.Client // webhooks; default a client without redirects
}

// Notifier plans and sends notifications. It is safe for concurrent use.
type Notifier struct {
	cfg     Config
	http    *http.Client
	wake    chan struct{}
	running atomic.Int32 // Run loops: with one, Ended leaves the sending to it
}

// New fills in cfg's defaults.
func New(cfg Config) *Notifier {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.GiveUp <= 0 {
		cfg.GiveUp = DefaultGiveUp
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HowToAnswer == nil {
		cfg.HowToAnswer = func(string, event.RunWaitingData) string { return "" }
	}
	client := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		client = &c
	}
	// A redirect would turn the POST into a GET: say so instead.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Notifier{cfg: cfg, http: client, wake: make(chan struct{}, 1)}
}

// claimFor is how long a sender holds a notification it tries: past it,
// the sender is taken to have died, and a notification still pending
// becomes unknown. It outlasts a try and the writes around it.
func (n *Notifier) claimFor() time.Duration { return 2*n.cfg.Timeout + 5*time.Second }

// settings reads config.toml's [[notify]] blocks and public_url.
func (n *Notifier) settings() (config.File, error) {
	if n.cfg.Home == "" {
		return config.File{}, nil
	}
	f, _, err := config.ReadFile(n.cfg.Home)
	return f, err
}

// Ended plans what is told of a drive of run r that ended with an event
// of type typ: each wait a person resolves of a run that parked
// (run.waiting), or a run's completion or failure. Then it sends them, or,
// with a Run loop in this process, leaves them to it.
func (n *Notifier) Ended(ctx context.Context, r *store.Run, typ string) error {
	f, err := n.settings()
	if err != nil || len(f.Notify) == 0 {
		return err
	}
	var plan []store.Notification
	switch typ {
	case event.RunWaiting:
		ws, err := n.cfg.DB.Waits(ctx, r.ID)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if w.Resolution != nil || !personal(w.Waiting.Kind) {
				continue
			}
			e := event.New(event.RunWaiting, w.Waiting)
			e.RunID, e.SessionID, e.PhaseID, e.Seq, e.TS = r.ID, r.SessionID, w.PhaseID, w.Seq, w.CreatedAt
			m := Message{Notification: config.NotifyWaiting, RunID: r.ID, SessionID: r.SessionID, Event: mustJSON(e),
				Text: waitingText(r, w.Waiting, n.cfg.HowToAnswer(r.ID, w.Waiting))}
			plan = append(plan, planned(f, m, "wait:"+w.Waiting.WaitID, w.Seq, w.Waiting.WaitID)...)
		}
	case event.RunCompleted, event.RunFailed:
		e, err := n.cfg.DB.LastEvent(ctx, r.ID)
		if err != nil {
			return err
		}
		if e.Type != typ {
			return nil // the run went on since
		}
		var fin event.RunFinishedData
		if err := e.Decode(&fin); err != nil {
			return err
		}
		on := config.NotifyCompleted
		if typ == event.RunFailed {
			on = config.NotifyFailed
		}
		m := Message{Notification: on, RunID: r.ID, SessionID: r.SessionID, Event: mustJSON(e), Text: endText(r, fin)}
		plan = planned(f, m, fmt.Sprintf("seq:%d", e.Seq), e.Seq, "")
	default:
		return nil // cancelled or interrupted: the person who did it knows
	}
	return n.send(ctx, r.ID, plan)
}

// JobFailed plans what is told of a scheduled job whose last attempt
// failed: e is its job.failed event, which names the attempt's run, and
// attempt identifies the tick and attempt; text says what failed.
func (n *Notifier) JobFailed(ctx context.Context, e event.Event, attempt, text string) error {
	f, err := n.settings()
	if err != nil || len(f.Notify) == 0 || e.RunID == "" {
		return err
	}
	m := Message{Notification: config.NotifyJobFailed, RunID: e.RunID, Event: mustJSON(e), Text: text}
	return n.send(ctx, e.RunID, planned(f, m, "job:"+attempt, 0, ""))
}

// send stores plan, then sends what is due of the run, unless a Run loop
// of this process will.
func (n *Notifier) send(ctx context.Context, runID string, plan []store.Notification) error {
	if len(plan) == 0 {
		return nil
	}
	if _, err := n.cfg.DB.PlanNotifications(ctx, plan); err != nil {
		return err
	}
	if n.running.Load() > 0 {
		select {
		case n.wake <- struct{}{}:
		default:
		}
		return nil
	}
	n.Deliver(ctx, runID)
	return nil
}

// planned is m for each block of f that is on its event.
func planned(f config.File, m Message, eventID string, seq int64, waitID string) []store.Notification {
	var out []store.Notification
	for _, b := range f.Notify {
		if !b.Wants(m.Notification) {
			continue
		}
		b.On = nil // the channel is where it sends, whatever it is on
		channel := mustJSON(b)
		m.Key = Key(m.RunID, eventID, channel)
		out = append(out, store.Notification{
			Key: m.Key, RunID: m.RunID, Event: m.Notification, Seq: seq, WaitID: waitID,
			Channel: channel, Payload: mustJSON(m),
		})
	}
	return out
}

// Key is a notification's idempotency key: the run, the event (its seq,
// or a wait's id) and the channel, hashed. Receivers get it (a webhook's
// Idempotency-Key, an email's Message-ID) and may drop a duplicate.
func Key(runID, eventID string, channel []byte) string {
	h := sha256.New()
	for _, s := range []string{runID, eventID, string(channel)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "notify-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// personal reports whether a person resolves a wait of this kind: a
// sleep ends by itself.
func personal(kind string) bool { return kind != event.WaitSleep }

// Run sends what falls due until ctx ends: at once, when a drive of this
// process plans some, at the next retry, and every Poll for what other
// processes planned (a CLI run's retries, a worker's).
func (n *Notifier) Run(ctx context.Context) {
	n.running.Add(1)
	defer n.running.Add(-1)
	for {
		wait := n.cfg.Poll
		if next := n.Deliver(ctx, ""); !next.IsZero() {
			wait = min(wait, max(time.Until(next), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-n.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// Deliver tries each notification that is due (of run runID, or of every
// run when it is ""), and returns when the next falls due (zero if none).
// Once ctx ends it starts no more tries; those under way go on to their
// end (bounded by the timeout), since one cut short after it was sent
// could only be unknown.
func (n *Notifier) Deliver(ctx context.Context, runID string) time.Time {
	keys, next, err := n.cfg.DB.DueNotifications(ctx, runID, n.cfg.DB.Now())
	if err != nil {
		n.cfg.Logger.Warn("notifications due", "err", err)
		return n.cfg.DB.Now().Add(n.cfg.Poll)
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallel)
	for _, key := range keys {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			n.try(context.WithoutCancel(ctx), key)
		})
	}
	wg.Wait()
	if _, again, err := n.cfg.DB.DueNotifications(context.WithoutCancel(ctx), runID, n.cfg.DB.Now()); err == nil {
		next = again // a try may have queued a retry sooner
	}
	return next
}

// try claims one notification and sends it once.
func (n *Notifier) try(ctx context.Context, key string) {
	log := n.cfg.Logger.With("notification", key)
	db := n.cfg.DB
	got, err := db.ClaimNotification(ctx, key, db.Now().Add(n.claimFor()))
	if err != nil || got == nil {
		if err != nil {
			log.Warn("claim notification", "err", err)
		}
		return
	}
	var ch config.Notify
	var m Message
	if err = json.Unmarshal(got.Channel, &ch); err == nil {
		err = json.Unmarshal(got.Payload, &m)
	}
	channel := ch.Channel()
	if got.State == event.StatusUnknown {
		n.warn(ctx, got.RunID, "the %s notification to %s may or may not have arrived: %s; it is not sent again unless you ask",
			got.Event, channel, got.LastError)
		return
	}
	if err != nil {
		n.notSent(ctx, got, channel, fmt.Errorf("unreadable notification: %w", err))
		return
	}
	if got.WaitID != "" {
		open, err := n.link(ctx, got, &m)
		switch {
		case err != nil:
			n.notSent(ctx, got, channel, err)
			return
		case !open:
			if err := db.SkipNotification(ctx, key, "the wait was resolved before it was sent"); err != nil {
				log.Warn("skip notification", "err", err)
			}
			return
		}
	}
	tctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	details, err := n.deliver(tctx, ch, m)
	cancel()
	persist := context.WithoutCancel(ctx)
	switch {
	case err == nil:
		if err := db.NotificationSent(persist, key, details); err != nil {
			log.Warn("record notification sent", "err", err)
		}
	case tools.IsNotSent(err):
		n.notSent(persist, got, channel, err)
	default:
		if err := db.NotificationUnknown(persist, key, err.Error()); err != nil {
			log.Warn("record notification unknown", "err", err)
		}
		n.warn(persist, got.RunID, "the %s notification to %s may or may not have arrived: %v; it is not sent again unless you ask",
			got.Event, channel, err)
	}
}

// notSent records a try that did not deliver: queued again with backoff,
// or given up a day after it was planned. The first failure and the
// giving up are recorded as warnings.
func (n *Notifier) notSent(ctx context.Context, got *store.Notification, channel string, cause error) {
	delay := n.cfg.Backoff
	for i := 1; i < got.Tries && delay < maxBackoff; i++ {
		delay *= 2
	}
	next := n.cfg.DB.Now().Add(min(delay, maxBackoff))
	giveUp := got.CreatedAt.Add(n.cfg.GiveUp)
	if next.After(giveUp) {
		next = time.Time{}
	}
	if err := n.cfg.DB.NotificationNotSent(ctx, got.Key, cause.Error(), next); err != nil {
		n.cfg.Logger.Warn("record notification not sent", "notification", got.Key, "err", err)
	}
	switch {
	case next.IsZero():
		n.warn(ctx, got.RunID, "the %s notification to %s was not sent after %d tries; giving up: %v", got.Event, channel, got.Tries, cause)
	case got.Tries == 1:
		n.warn(ctx, got.RunID, "the %s notification to %s was not sent: %v; trying again until %s", got.Event, channel, cause,
			giveUp.UTC().Format(time.RFC3339))
	}
}

// warn records a warning in the run's events, and logs it.
func (n *Notifier) warn(ctx context.Context, runID, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	n.cfg.Logger.Warn(msg, "run_id", runID)
	if n.cfg.Record == nil {
		return
	}
	if err := n.cfg.Record(ctx, runID, event.New(event.Warning, event.WarningData{Message: msg})); err != nil {
		n.cfg.Logger.Warn("record a notification's warning", "run_id", runID, "err", err)
	}
}

// link gives m, a notification about a wait, a one-decision link if
// public_url is set and a person decides the wait by one: a new token for
// each try, as only its hash is kept. open is false once the wait is
// resolved: there is nothing left to tell.
func (n *Notifier) link(ctx context.Context, got *store.Notification, m *Message) (open bool, err error) {
	ws, err := n.cfg.DB.Waits(ctx, got.RunID)
	if err != nil {
		return false, err
	}
	var w *store.Wait
	for i := range ws {
		if ws[i].Waiting.WaitID == got.WaitID {
			w = &ws[i]
		}
	}
	if w == nil || w.Resolution != nil || !w.Until.After(n.cfg.DB.Now()) {
		return false, nil
	}
	f, err := n.settings()
	if err != nil {
		return false, err
	}
	if f.PublicURL == "" || (w.Waiting.Kind != event.WaitApproval && w.Waiting.Kind != event.WaitQuestion) {
		return true, nil
	}
	token, err := NewToken()
	if err != nil {
		return false, err
	}
	if err := n.cfg.DB.CreateWaitLink(ctx, token, got.RunID, got.WaitID, w.Until); err != nil {
		return false, err
	}
	m.Link = strings.TrimRight(f.PublicURL, "/") + "/w/" + token
	return true, nil
}

// NewToken is a one-decision link's token: 256 random bits.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("notify: marshal %T: %v", v, err)) // plain structs and events
	}
	return b
}
