package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"agent/chat"
	"agent/config"
	"agent/console"
	"agent/event"
	"agent/gateway/api"
	"agent/supervisor"
)

// gatewayDefaultValue stands for a bare --gateway (see normalizeArgs).
const gatewayDefaultValue = "default"

// gatewayAddress resolves the gateway to talk to (api.Address); a bare
// --gateway asks for AGENT_GATEWAY's or the default. ok is false when
// neither the flag nor the environment asks for a gateway.
func gatewayAddress(c *cli.Context) (addr string, ok bool) {
	if c.String("gateway") == gatewayDefaultValue {
		addr, _ = api.Address("")
		return addr, true
	}
	return api.Address(c.String("gateway"))
}

// dialGateway connects and authenticates (api.Connect) with the token
// this client presents (api.ClientToken).
func dialGateway(ctx context.Context, addr string) (*api.Stream, error) {
	home, err := config.Home()
	if err != nil {
		return nil, err
	}
	token, err := api.ClientToken(home)
	if err != nil {
		// Without a token, most likely no gateway was ever started: if
		// nothing answers, say that, which is what there is to fix first.
		if gone := api.Probe(ctx, addr); gone != nil {
			return nil, gone
		}
		return nil, err
	}
	s, err := api.Connect(ctx, addr, token)
	var gone *api.UnreachableError
	if err != nil && !errors.As(err, &gone) {
		return nil, &gatewayError{err: err}
	}
	return s, err
}

// gatewayError is a failure to use the gateway: exit 3, like an
// unreachable model provider, unless the gateway says the input was bad.
type gatewayError struct{ err error }

func (e *gatewayError) Error() string { return "gateway: " + e.err.Error() }
func (e *gatewayError) Unwrap() error { return e.err }

// gatewayExitCode maps a gateway error code to the CLI's exit codes.
func gatewayExitCode(err error) int {
	switch api.ErrorCode(err) {
	case api.CodeBadRequest, api.CodeInvalidOptions, api.CodeNotFound, api.CodeUnauthorized, api.CodeForbidden,
		api.CodeInvalidJob, api.CodeSchedulerOff:
		return 2
	case api.CodeSessionLocked, api.CodeConflict:
		return 4
	}
	return 3
}

// runViaGateway sends a run to the gateway and follows it (viaGateway).
func runViaGateway(c *cli.Context, addr, prompt string, opts supervisor.Options) error {
	if opts.Record != "" {
		return usageErrorf("--record is not supported with --gateway: the gateway makes the model calls")
	}
	ws, err := filepath.Abs(config.Pick(c.String("workspace"), "."))
	if err != nil {
		return usageErrorf("--workspace: %v", err)
	}
	return viaGateway(c, addr, opts.Harness, func(s *api.Stream) (api.RunStartResult, error) {
		p := api.RunStartParams{SessionID: c.String("session"), Input: prompt, Workspace: ws, Options: opts}
		return s.StartRun(c.Context, p, console.OneLine(prompt, 60))
	})
}

// resumeViaGateway asks the gateway to resume one of its sessions' runs,
// and follows it (viaGateway).
func resumeViaGateway(c *cli.Context, addr, runID string) error {
	for _, name := range []string{"model", "base-url", "max-turns", "max-repeats", "model-attempts", "model-idle-timeout", "model-call-timeout", "timeout", "record", "replay", "image"} {
		if c.IsSet(name) {
			return usageErrorf("--%s with --gateway: the gateway resumes a run with the options it was started with", name)
		}
	}
	return viaGateway(c, addr, false, func(s *api.Stream) (api.RunStartResult, error) {
		return s.ResumeRun(c.Context, api.RunResumeParams{RunID: runID, ResendUnknown: c.Bool("resend-unknown")})
	})
}

// viaGateway starts a run on the gateway at addr and shows its events
// exactly as a local run would, and exits as the run did. Ctrl-C
// interrupts the run resumably, as it does locally; a second one stops
// waiting.
func viaGateway(c *cli.Context, addr string, harness bool, start func(*api.Stream) (api.RunStartResult, error)) error {
	s, err := dialGateway(c.Context, addr)
	if err != nil {
		return err
	}
	defer s.Close()
	started, err := start(s)
	if err != nil {
		return &gatewayError{err: err}
	}
	show := newDisplay(c, harness)
	defer show.Close()
	if v, ok := show.(interface{ ViaGateway(string) }); ok {
		v.ViaGateway(addr)
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	var asker *chat.TerminalAsker
	if inline(c) {
		asker = chat.NewTerminalAsker(c.App.Reader, c.App.ErrWriter)
	}
	waits := chat.NewGatewayAsker(c.Context, s, started.RunID, asker, c.App.ErrWriter)
	defer waits.Stop()
	fin, err := s.Follow(started, func(e event.Event) { show.Print(e); waits.Seen(e) }, sig, waits.Parked)
	var problem *api.ProblemError
	var lost *api.LostError
	switch {
	case err == nil:
		return finished(c, started.RunID, fin)
	case errors.Is(err, api.ErrStoppedWaiting):
		return &exitError{code: 130, msg: err.Error()}
	case errors.As(err, &problem), errors.As(err, &lost):
		return &gatewayError{err: err}
	}
	return &exitError{code: 130, msg: "gateway: " + err.Error()} // the interrupt could not be sent
}

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "follow a gateway session's events, replaying what you missed",
		ArgsUsage: "SESSION",
		Description: "Replays every persisted event of the session after --after-seq (default 0: all), then streams\n" +
			"live events until Ctrl-C. Seqs are gapless per session, so re-attaching with the last seq you saw\n" +
			"continues exactly where you left off.\n\n" +
			"Examples:\n" +
			"  agent attach 3f2a\n" +
			"  agent attach 3f2a --after-seq 120 --json",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print events as JSON lines"},
			&cli.Int64Flag{Name: "after-seq", Usage: "replay only events after this seq"},
			&cli.StringFlag{Name: "gateway", Usage: "gateway URL (default $AGENT_GATEWAY or " + api.DefaultURL + ")"},
		},
		Action: attachAction,
	}
}

func attachAction(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usageErrorf("attach needs exactly one SESSION; see 'agent sessions list'")
	}
	addr, _ := gatewayAddress(c)
	sessionID, afterSeq := c.Args().First(), c.Int64("after-seq")
	ctx, cancel := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	show := newDisplay(c, false)
	defer show.Close()
	// People see the session's prompts before its answers; --json has
	// them as events.
	printer, human := show.(*console.Printer)
	if human {
		printer.ShowPrompts(true)
	}
	s, err := dialGateway(ctx, addr)
	if err != nil {
		return err
	}
	defer s.Close()
	// Frames are shown from this goroutine, so what it says itself comes
	// before the replay rather than somewhere in it.
	begin := func(res api.SessionResumeResult) {
		if human {
			printer.Following(res.SessionID, afterSeq, res.LastSeq)
		}
	}
	err = s.Attach(ctx, sessionID, afterSeq, begin, show.Print)
	var problem *api.ProblemError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &problem):
		return &exitError{code: 3, msg: fmt.Sprintf("gateway: %v; re-attach with --after-seq %d", problem.Frame.Error, problem.Frame.AfterSeq)}
	}
	return &gatewayError{err: err}
}
