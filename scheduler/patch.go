package scheduler

import (
	"encoding/json"
	"fmt"
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

// CheckChange checks what a job.create or job.update gives that needs no
// other value of the job: the schedule and its zone (nil: not given) and
// each value of a partial policy (PolicyPatch). A client checks it before
// it asks a gateway, so that a typo is not met first with "no gateway
// answers". A retry cap below a base the job already has is the
// gateway's to find.
func CheckChange(cronExpr, timezone *string, patch json.RawMessage) error {
	tz := ""
	if timezone != nil {
		if _, err := LoadZone(*timezone); err != nil {
			return err
		}
		tz = *timezone
	}
	if cronExpr != nil {
		if _, err := Parse(*cronExpr, tz); err != nil {
			return err
		}
	}
	if len(patch) == 0 {
		return nil
	}
	p := DefaultPolicy()
	if err := json.Unmarshal(patch, &p); err != nil {
		return fmt.Errorf("invalid policy: %w", err)
	}
	var given struct {
		Retry map[string]json.RawMessage `json:"retry"`
	}
	if err := json.Unmarshal(patch, &given); err == nil && (given.Retry["base"] == nil || given.Retry["cap"] == nil) {
		p.Retry.Cap = max(p.Retry.Cap, p.Retry.Base) // one of them is the job's
	}
	return p.Validate()
}
