package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Receipt checks that every receipt type in Evidence.Receipts was recorded
// in this phase. Only Input.Receipts is looked at, so a receipt from another
// phase or run cannot prove this one.
type Receipt struct{}

// Evaluate returns one check per listed receipt type.
func (Receipt) Evaluate(ctx context.Context, in Input) []Check {
	var out []Check
	for _, typ := range in.Evidence.Receipts {
		typ = strings.TrimSpace(typ)
		var keys []string
		var details json.RawMessage
		for _, r := range in.Receipts {
			if r.Type == typ {
				if len(keys) == 0 {
					details = r.Details
				}
				keys = append(keys, r.Key)
			}
		}
		if typ == "" || len(keys) == 0 {
			note := fmt.Sprintf("no %s receipt recorded in this phase", typ)
			for _, u := range in.Unknown {
				if u.Type == typ {
					note += fmt.Sprintf("; the %s effect with key %s has an unknown outcome: the process stopped between "+
						"recording the intent and recording the result, so it was not repeated. Check whether it arrived; "+
						"'agent resume %s --resend-unknown' sends it again", typ, u.Key, in.RunID)
					break
				}
			}
			out = append(out, Check{Ref: typ, Note: note})
			continue
		}
		note := fmt.Sprintf("%s receipt recorded: key %s", typ, keys[0])
		if d := compactJSON(details); d != "" {
			note += ", details " + clip(d, 200)
		}
		if len(keys) > 1 {
			note += fmt.Sprintf(" (and %d more)", len(keys)-1)
		}
		out = append(out, Check{Ref: typ + ":" + keys[0], OK: true, Note: note})
	}
	return out
}

// compactJSON returns raw JSON on one line, or "" for none.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
