package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unicode/utf8"

	"agent/gateway/api"
	"agent/store"
)

// Defaults of Config.
const (
	DefaultMaxConcurrentRuns = 4
	DefaultRunTimeout        = 30 * time.Minute
	DefaultDrainGrace        = 30 * time.Second
	DefaultLeaseTTL          = 30 * time.Second
	DefaultSubscriberBuffer  = 4096
	// DefaultMaxConnections is well under the usual limit of 1,024 open
	// files, which the store, the children's pipes and logs share.
	DefaultMaxConnections    = 512
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultConnectTimeout    = 10 * time.Second
	// MinTokenLength is the shortest token a gateway accepts.
	MinTokenLength = 16
)

// Reclaim policies: what Start does with a run a dead gateway left running.
const (
	// ReclaimResume continues such a run once (store.Run.Reclaims < 1) and
	// fails it the next time, so a run that keeps killing its gateway
	// cannot loop forever. Runs a clean Stop interrupted are always resumed.
	ReclaimResume = "resume"
	// ReclaimFail records such a run as failed.
	ReclaimFail = "fail"
)

// Config is what a gateway needs. Zero values take the defaults above.
type Config struct {
	Listen      string // host:port; default 127.0.0.1:7420
	AllowRemote bool   // allow a non-loopback Listen; the token is required anyway
	Token       string // required, at least MinTokenLength characters: every request must present it
	DB          *store.DB
	Version     string // shown as "agent VERSION" in connect and /healthz

	// DefaultWorkspace is where runs work when run.start names no
	// workspace; default the current directory. Must be absolute.
	DefaultWorkspace string
	// WorkspaceRoots are the directories, besides DefaultWorkspace, in
	// and below which run.start may name a workspace (`agent gateway
	// --workspace-root`). Absolute; symlinks are resolved.
	WorkspaceRoots []string
	Model          ModelDefaults
	// AllowAnyBaseURL lets run.start's options.base_url name any model
	// endpoint; otherwise only Model.BaseURL, since the gateway sends its
	// API key there (`agent gateway --allow-any-base-url`).
	AllowAnyBaseURL bool
	// AllowUnsandboxed lets runs and jobs ask for sandbox "off"
	// (README.md#the-sandbox): without it the gateway refuses.
	AllowUnsandboxed bool
	// Home is AGENT_HOME: file checkpoints keep their content there, and
	// checkpoint.rewind puts it back from there.
	Home string

	// Children: the binary run as `agent runner` (default this one), its
	// environment (default os.Environ(), plus OPENAI_API_KEY from
	// Model.APIKey; side-effecting tools read it too), its hang watchdog
	// and SIGTERM-to-SIGKILL grace (zero: the adapter's defaults).
	Exe              string
	Env              []string
	HeartbeatTimeout time.Duration
	KillGrace        time.Duration
	// LogDir receives each child's stderr as RUN_ID.log; empty: kept
	// only for crash reasons.
	LogDir string

	// Workers queues runs in the store for `agent worker` processes
	// instead of driving them here (workers.go): on a store many
	// machines share, so that any gateway serves any session.
	Workers bool

	MaxConcurrentRuns int           // runs executing at once; more wait in a FIFO queue
	RunTimeout        time.Duration // per run, unless options.timeout says otherwise
	DrainGrace        time.Duration // how long Stop lets running runs finish
	ReclaimPolicy     string        // ReclaimResume (default) or ReclaimFail
	LeaseTTL          time.Duration // run leases; renewed every LeaseTTL/3
	// WakePoll is how often the gateway looks for waits another process
	// answered (default 50 ms, a query of the open waits alone; PostgreSQL
	// also notifies it at once).
	WakePoll time.Duration
	// SubscriberBuffer is how many events a client may fall behind a
	// session's live stream before it is disconnected (CodeSlowConsumer).
	SubscriberBuffer int

	// MaxConnections caps the connections held open (default 512). Over
	// it, a new connection replaces the oldest one doing no authorised
	// work, or is answered 503 when all of them are.
	MaxConnections int
	// ReadHeaderTimeout: a connection must send a request's headers
	// within it (default 10s). ReadTimeout: a request's body, except on
	// the streaming routes (/ws, events), within it after the headers
	// (default 30s). IdleTimeout: a keep-alive connection may wait this
	// long for its next request (default 60s). ConnectTimeout: a
	// WebSocket must send its connect frame within it (default 10s).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	ConnectTimeout    time.Duration

	Logger *slog.Logger     // default: text on stderr
	Now    func() time.Time // the clock for durations and timestamps; default time.Now

	// Scheduler serves scheduled jobs (the job.* methods and events,
	// docs/PROTOCOL.md#scheduled-jobs); nil leaves them out.
	Scheduler *SchedulerConfig

	// RetentionDays, when more than 0, prunes the runs that finished more
	// than that many days ago at Start and then daily (retention.go).
	RetentionDays int
}

// SchedulerConfig configures scheduled jobs. Zero values take the
// scheduler's defaults.
type SchedulerConfig struct {
	// Enabled fires ticks. While it is off, jobs can still be created,
	// listed and changed, but nothing fires and job.run_now answers
	// scheduler_disabled.
	Enabled bool
	// PollInterval is the longest the scheduler sleeps between looks at
	// the store; default 5s.
	PollInterval time.Duration
	// MaxConcurrentRuns bounds job runs in flight across all jobs;
	// default 2. They also count against the gateway's own limit.
	MaxConcurrentRuns int
	// RecoveryPolicy is the missed-run policy of jobs that set none:
	// "skip" (default) or "run_once_on_recovery".
	RecoveryPolicy string
}

// ModelDefaults are the model settings of runs that do not set their own.
type ModelDefaults struct {
	Name     string
	BaseURL  string
	APIKey   string // passed to children in their environment, never in a spec
	Attempts int    // attempts per model call; 0: the client's default
	MaxTurns int    // 0: the runner's default
}

func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = api.DefaultListen
	}
	if c.DefaultWorkspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return c, fmt.Errorf("gateway: find the current directory: %w", err)
		}
		c.DefaultWorkspace = wd
	}
	if c.MaxConcurrentRuns == 0 {
		c.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = DefaultRunTimeout
	}
	if c.DrainGrace == 0 {
		c.DrainGrace = DefaultDrainGrace
	}
	if c.ReclaimPolicy == "" {
		c.ReclaimPolicy = ReclaimResume
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.WakePoll == 0 {
		c.WakePoll = defaultWakePoll
	}
	if c.SubscriberBuffer == 0 {
		c.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	return c, c.validate()
}

func (c Config) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("gateway: a store is required")
	case c.Token == "":
		return errors.New("gateway: a token is required")
	case utf8.RuneCountInString(c.Token) < MinTokenLength:
		return fmt.Errorf("gateway: the token has %d characters; at least %d are required: set AGENT_GATEWAY_TOKEN to a longer one (e.g. openssl rand -hex 32), or unset it and delete the token file $AGENT_HOME/gateway.token to get a new one", utf8.RuneCountInString(c.Token), MinTokenLength)
	case c.MaxConcurrentRuns < 1:
		return fmt.Errorf("gateway: max concurrent runs must be at least 1, got %d", c.MaxConcurrentRuns)
	case c.RunTimeout < 0, c.DrainGrace < 0, c.LeaseTTL < 0, c.HeartbeatTimeout < 0, c.KillGrace < 0, c.WakePoll < 0,
		c.ReadHeaderTimeout < 0, c.ReadTimeout < 0, c.IdleTimeout < 0, c.ConnectTimeout < 0:
		return errors.New("gateway: durations must be positive")
	case c.RetentionDays < 0:
		return fmt.Errorf("gateway: retention days must be 0 (off) or more, got %d", c.RetentionDays)
	case c.MaxConnections < 1:
		return fmt.Errorf("gateway: max connections must be at least 1, got %d", c.MaxConnections)
	case c.SubscriberBuffer < 1:
		return fmt.Errorf("gateway: subscriber buffer must be at least 1, got %d", c.SubscriberBuffer)
	case c.ReclaimPolicy != ReclaimResume && c.ReclaimPolicy != ReclaimFail:
		return fmt.Errorf("gateway: reclaim policy %q is unknown (want %s or %s)", c.ReclaimPolicy, ReclaimResume, ReclaimFail)
	case !filepath.IsAbs(c.DefaultWorkspace):
		return fmt.Errorf("gateway: default workspace %q is not an absolute path", c.DefaultWorkspace)
	}
	if st, err := os.Stat(c.DefaultWorkspace); err != nil || !st.IsDir() {
		return fmt.Errorf("gateway: default workspace %s is not a directory", c.DefaultWorkspace)
	}
	for _, root := range c.WorkspaceRoots {
		if !filepath.IsAbs(root) {
			return fmt.Errorf("gateway: workspace root %q is not an absolute path", root)
		}
		if st, err := os.Stat(root); err != nil || !st.IsDir() {
			return fmt.Errorf("gateway: workspace root %s is not a directory", root)
		}
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen address %q: %w", c.Listen, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		// Bad input, not a port this machine refuses (ListenError).
		return fmt.Errorf("gateway: listen address %q: port %q is no port number: want host:PORT, PORT from 0 (any free one) to 65535", c.Listen, port)
	}
	if !c.AllowRemote && !isLoopback(host) {
		return fmt.Errorf("gateway: %s is reachable from other machines; listen on 127.0.0.1, or pass --allow-remote (the token is still required)", c.Listen)
	}
	return nil
}

// ListenError is an address the gateway cannot listen on: in use, not
// this machine's, or not allowed (docs/PROTOCOL.md#exit-codes, exit 5).
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	fix := "pass --listen with another address"
	if errors.Is(e.Err, syscall.EADDRINUSE) {
		fix = "another program (perhaps another gateway) listens there: stop it, or pass --listen 127.0.0.1:PORT with a free port (0 picks one)"
	}
	return fmt.Sprintf("gateway: cannot listen on %s: %v; %s", e.Addr, e.Err, fix)
}

func (e *ListenError) Unwrap() error { return e.Err }

// isLoopback reports whether host only accepts local connections. An
// empty host listens on every interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
