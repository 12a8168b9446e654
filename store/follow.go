package store

import (
	"context"
	"time"

	"agent/event"
)

// followPage and followPoll are how FollowEvents reads: a page at a time,
// and, at the end of what is stored, again after a while.
const (
	followPage = 1000
	followPoll = 250 * time.Millisecond
)

// FollowEvents hands show each stored event of a run after afterSeq, in
// seq order. With follow it then waits for more, until the run's terminal
// event or the end of ctx.
func (db *DB) FollowEvents(ctx context.Context, runID string, afterSeq int64, follow bool, show func(event.Event) error) error {
	ended := false
	for {
		evs, err := db.ListEvents(ctx, runID, afterSeq, followPage)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := show(e); err != nil {
				return err
			}
			afterSeq, ended = e.Seq, ended || event.IsTerminal(e.Type)
		}
		if len(evs) == followPage {
			continue
		}
		if !follow || ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
	}
}
