package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

func TestWritesAfterCloseFail(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "superego.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	err = flow.Wait(func(done func(error)) {
		s.Append("i", flow.Event{ID: 1, Name: flow.EventDone, Data: flow.Done{}}, done)
	})
	if !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	if err := s.Close(); err == nil {
		t.Log("second close reports the closed handles") // either way, it must not panic
	}
}

func TestReopenKeepsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	next := "b"
	step := flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi", NextAgent: &next, Thinking: "T", AgentGuidance: "G"}
	flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f"}, done) })
	flow.Wait(func(done func(error)) {
		s.Append("i", flow.Event{ID: 1, Name: flow.EventCompleteStep, Data: step}, done)
	})
	s.Close()
	s, err = sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events, err := s.Events(context.Background(), "i", 0)
	if err != nil || len(events) != 1 {
		t.Fatalf("%d events, %v", len(events), err)
	}
	if got := events[0].Data.(flow.Step); got.Thinking != "T" || got.AgentGuidance != "G" || got.Response != "hi" {
		t.Errorf("step after reopening: %+v", got)
	}
}

// walPages is the store's wal_autocheckpoint.
const walPages = 8000

// The WAL is copied back into the database and reused: it must not grow
// with every commit.
func TestWALStaysBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: time.Now()}, done) })
	// Steps of 64 KiB, sixteen pages or more a commit: three checkpoints'
	// worth of WAL in a few thousand commits.
	const commits = 1500
	big := strings.Repeat("x", 64<<10)
	for n := int64(1); n <= commits; n++ {
		e := stepEvent(n)
		step := e.Data.(flow.Step)
		step.Response = big
		e.Data = step
		if err := flow.Wait(func(done func(error)) { s.Append("i", e, done) }); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// Without checkpoints the WAL would hold every commit's pages; with them
	// it stays near one checkpoint's worth.
	if limit := int64(walPages) * 4096 * 3 / 2; fi.Size() > limit {
		t.Errorf("WAL is %d bytes after %d commits (limit %d): checkpoints are not running", fi.Size(), commits, limit)
	}
}
