package scheduler

import (
	"encoding/json"
	"strings"
)

// PolicyPatch is a partial policy as job.create and job.update take it,
// from the values given by their keys in the policy's JSON ("retry.base":
// in its retry object): the fields left out keep their values, or take
// the defaults on create. Nil if none is given.
func PolicyPatch(given map[string]any) json.RawMessage {
	if len(given) == 0 {
		return nil
	}
	p, retry := map[string]any{}, map[string]any{}
	for key, v := range given {
		if k, ok := strings.CutPrefix(key, "retry."); ok {
			retry[k] = v
		} else {
			p[key] = v
		}
	}
	if len(retry) > 0 {
		p["retry"] = retry
	}
	data, _ := json.Marshal(p) // strings, numbers, booleans and lists of strings
	return data
}
