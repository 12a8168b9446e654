package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
)

// Private are the paths the model's tools and commands never reach, even
// inside their workspace (README.md#the-sandbox): AGENT_HOME (the database, the
// gateway token, config.toml, blobs) and, with the store on PostgreSQL,
// the client's password, service and key files.
func Private(home string) []string {
	var out []string
	if home != "" {
		out = append(out, home)
	}
	db := os.Getenv(DatabaseEnv)
	if db == "" {
		return out
	}
	userHome, _ := os.UserHomeDir()
	inHome := func(name string) string {
		if userHome == "" {
			return ""
		}
		return filepath.Join(userHome, name)
	}
	out = append(out,
		pick(os.Getenv("PGPASSFILE"), inHome(".pgpass")),
		pick(os.Getenv("PGSERVICEFILE"), inHome(".pg_service.conf")),
		inHome(".postgresql"), // the client's certificates and keys
		os.Getenv("PGSSLKEY"), os.Getenv("PGSSLCERT"))
	if u, err := url.Parse(db); err == nil {
		q := u.Query()
		out = append(out, q.Get("sslkey"), q.Get("sslcert"), q.Get("passfile"))
	}
	kept := out[:0]
	for _, p := range out {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return kept
}

func pick(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkOwnership refuses a config file others could have written: it
// names MCP servers that run as the user, outside the sandbox, so a file
// writable by anyone else is a way to run code as the user (as ssh
// refuses such a config).
func checkOwnership(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid && st.Uid != 0 {
		return &HomeError{Path: path, Err: fmt.Errorf("it is owned by uid %d, not by you (uid %d), and the MCP servers it names would run as you", st.Uid, uid),
			Fix: "chown it to yourself"}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &HomeError{Path: path, Err: fmt.Errorf("others may write it (mode %04o), and the MCP servers it names would run as you", fi.Mode().Perm()),
			Fix: "chmod go-w " + path}
	}
	return nil
}
