package supervisor

import (
	"context"

	"agent/store"
)

// RunDetail is r's story as store.RunDetail reads it, with how its
// commands are confined, which only its options say.
func RunDetail(ctx context.Context, db *store.DB, r *store.Run) (store.RunDetail, error) {
	d, err := db.RunDetail(ctx, r)
	if o, derr := DecodeOptions(r); derr == nil {
		d.Sandbox = o.SandboxSummary()
	}
	return d, err
}
