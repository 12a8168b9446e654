package event_test

import (
	"slices"
	"testing"

	"agent/event"
	"agent/event/eventtest"
)

// Every event type constant is in Types or ProtocolTypes, once: that
// list is what the consumers' tests check their switches against.
func TestTypesListsEveryType(t *testing.T) {
	all := append(slices.Clone(event.Types), event.ProtocolTypes...)
	for _, typ := range eventtest.TypeConstants(t) {
		if n := countOf(all, typ); n != 1 {
			t.Errorf("type %s is in Types and ProtocolTypes %d times, want once", typ, n)
		}
	}
	if got, want := len(all), len(eventtest.TypeConstants(t)); got != want {
		t.Errorf("Types and ProtocolTypes hold %d types, the constants %d", got, want)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
