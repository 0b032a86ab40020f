package sqlite_test

import (
	"path/filepath"
	"testing"

	"superego/flow"
	"superego/flow/storetest"
	"superego/sqlite"
)

func open(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "superego.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) flow.Store { return open(t) })
}
