package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestStart starts a server, talks to it, and checks that its cleanup
// stops it and leaves no files behind.
func TestStart(t *testing.T) {
	if BinDir() == "" {
		t.Skip("no PostgreSQL server installed; scripts/deps.sh installs it")
	}
	var dsn, data string
	t.Run("server", func(t *testing.T) {
		began := time.Now()
		dsn = Start(t)
		t.Logf("a server started in %s", time.Since(began).Round(time.Millisecond))

		ctx := context.Background()
		conn, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Exec(ctx, "SELECT version(), current_setting('data_directory'), current_setting('fsync')").ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		row := rows[0].Rows[0]
		if v := string(row[0]); !strings.HasPrefix(v, "PostgreSQL ") {
			t.Errorf("version() = %q", v)
		}
		data = string(row[1])
		if !strings.HasPrefix(data, os.TempDir()) || filepath.Base(data) != "data" {
			t.Errorf("data directory %s is not in the test's temporary directory", data)
		}
		if fsync := string(row[2]); fsync != "off" {
			t.Errorf("fsync = %s, want off", fsync)
		}
	})
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if conn, err := pgconn.Connect(ctx, dsn); err == nil {
		conn.Close(ctx)
		t.Errorf("the server still accepts connections after its test ended")
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("data directory %s left behind (stat: %v)", data, err)
	}
}
