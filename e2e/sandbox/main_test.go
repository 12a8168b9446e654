package sandbox

import (
	"testing"

	"agent/e2e/internal/e2etest"
)

func TestMain(m *testing.M) {
	e2etest.Main(m, map[string]func(){
		// What an adversary's SQLite client would do to agent.db.
		"forge-receipt": forgeReceipt,
	})
}
