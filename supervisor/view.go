package supervisor

import (
	"context"
	"encoding/json"

	"agent/config"
	"agent/store"
)

// RunDetail is r's story as store.RunDetail reads it, with how its
// commands are confined, which only its options say.
func RunDetail(ctx context.Context, db *store.DB, r *store.Run) (store.RunDetail, error) {
	d, err := db.RunDetail(ctx, r)
	if o, derr := DecodeOptions(r); derr == nil {
		d.Sandbox = o.SandboxSummary()
	}
	for i, n := range d.Notifications {
		var block config.Notify
		if json.Unmarshal(n.Block, &block) == nil {
			d.Notifications[i].Channel = block.Channel()
		}
	}
	return d, err
}
