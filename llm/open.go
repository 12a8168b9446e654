package llm

import (
	"fmt"
	"os"
	"time"
)

// Setup says how a run reaches its model: a provider at BaseURL, or the
// cassette at Replay. Record, if set, appends every exchange to a cassette.
type Setup struct {
	BaseURL     string
	APIKey      string
	MaxAttempts int
	// IdleTimeout is the longest a call waits for a data chunk
	// (--model-idle-timeout); CallTimeout bounds a whole call with its
	// retries. Zero means DefaultIdleTimeout and DefaultCallTimeout. See
	// Config.
	IdleTimeout, CallTimeout time.Duration
	// Scope keeps one child's exchanges apart from another's in a shared
	// cassette.
	Record, Replay, Scope string
	UserAgent             string
	OnRetry               func(RetryInfo)
}

// SetupError names the setting a model could not be opened with: base_url,
// replay or record.
type SetupError struct {
	Setting string
	Err     error
}

func (e *SetupError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// Open returns the model s describes and a function that closes what it
// opened (the record cassette).
func Open(s Setup) (Model, func(), error) {
	var model Model
	if s.Replay != "" {
		f, err := os.Open(s.Replay)
		if err != nil {
			return nil, nil, &SetupError{Setting: "replay", Err: err}
		}
		defer f.Close()
		if model, err = NewReplayer(f, s.Scope); err != nil {
			return nil, nil, &SetupError{Setting: "replay", Err: fmt.Errorf("%s: %w", s.Replay, err)}
		}
	} else {
		client, err := New(Config{
			BaseURL: s.BaseURL, APIKey: s.APIKey, MaxAttempts: s.MaxAttempts, OnRetry: s.OnRetry, UserAgent: s.UserAgent,
			IdleTimeout: s.IdleTimeout, CallTimeout: s.CallTimeout,
		})
		if err != nil {
			return nil, nil, &SetupError{Setting: "base_url", Err: err}
		}
		model = client
	}
	closeAll := func() {}
	if s.Record != "" {
		f, err := os.OpenFile(s.Record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, nil, &SetupError{Setting: "record", Err: err}
		}
		closeAll = func() { f.Close() }
		model = NewRecorder(model, f, s.Scope)
	}
	return model, closeAll, nil
}
