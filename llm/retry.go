package llm

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter bounds the Retry-After we read, so the conversion cannot
// overflow. It is no policy: a Retry-After is honoured, even beyond
// BackoffCap (a server that says "come back in 60s" means it), when it
// fits in the call's CallTimeout, and fails the call at once otherwise.
const maxRetryAfter = 24 * time.Hour

// RetryInfo describes a failed attempt that is about to be retried.
type RetryInfo struct {
	Attempt     int           // the attempt that failed, 1-based
	MaxAttempts int           // the configured total
	Delay       time.Duration // how long we wait before the next attempt
	Err         error         // the *Error of the failed attempt
	Status      int           // HTTP (or in-stream) status; 0 if none
}

// backoff returns the wait before the attempt after `attempt`: capped
// exponential backoff with equal jitter (half fixed, half random, so
// delays never collapse to zero), raised to the server's Retry-After.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.cfg.BackoffCap
	if attempt-1 < 32 {
		if exp := c.cfg.BackoffBase << (attempt - 1); exp > 0 && exp < d {
			d = exp
		}
	}
	d = d/2 + time.Duration(c.cfg.Rand()*float64(d/2))
	if retryAfter > d {
		d = retryAfter
	}
	return min(d, maxRetryAfter)
}

// parseRetryAfter reads retry-after-ms (OpenAI) or Retry-After in
// seconds or as an HTTP date. It returns 0 when absent or unparsable.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return seconds(ms / 1000)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		return seconds(secs)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

// seconds converts a server-given number of seconds into a duration in
// [0, maxRetryAfter], before the float can overflow.
func seconds(secs float64) time.Duration {
	switch {
	case !(secs > 0): // also catches NaN
		return 0
	case secs >= maxRetryAfter.Seconds():
		return maxRetryAfter
	}
	return time.Duration(secs * float64(time.Second))
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
