// Command floor is the startup floor BenchmarkStartup measures agent
// against: a static cgo binary with SQLite inside, as agent is, that
// writes a row to a database in memory (no disk to wait for) and says
// hello.
package main

import (
	"database/sql"
	"fmt"

	_ "github.com/mattn/go-sqlite3"
)

func main() {
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		panic(err)
	}
	if _, err := db.Exec(`CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('hello')`); err != nil {
		panic(err)
	}
	var v string
	if err := db.QueryRow(`SELECT v FROM t`).Scan(&v); err != nil {
		panic(err)
	}
	db.Close()
	fmt.Println(v)
}
