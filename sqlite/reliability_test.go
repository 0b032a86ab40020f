package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"superego/flow"
	"superego/flow/storetest"
	"superego/sqlite"
)

func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd to count open files in")
	}
	return len(fds)
}

// A burst of concurrent reads waits for the read pool instead of opening
// a connection, and its files, each: the files open after it stay few.
func TestReadBurstKeepsOpenFilesBounded(t *testing.T) {
	s := open(t)
	flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: time.Now()}, done) })
	// Reads of forty rows each last long enough to overlap.
	for n := int64(1); n <= 40; n++ {
		flow.Wait(func(done func(error)) { s.Append("i", []flow.Event{storetest.StepEvent(n)}, done) })
	}
	start := make(chan struct{})
	before := openFiles(t)
	// The most files open while the burst lasts, counted as it goes.
	peak, stop := make(chan int), make(chan struct{})
	go func() {
		most := 0
		for {
			most = max(most, openFiles(t))
			select {
			case <-stop:
				peak <- most
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	for range 600 {
		wg.Go(func() {
			<-start
			if events, err := s.Events(context.Background(), "i", 0); err != nil || len(events) != 40 {
				t.Errorf("%d events, %v", len(events), err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	// A read connection holds the database, its WAL and its shared memory:
	// three files each, for at most the pool's connections.
	if most, after := <-peak, openFiles(t); most-before > 3*16 || after-before > 3*16 {
		t.Errorf("%d files open before 600 concurrent reads, %d at most during them, %d after", before, most, after)
	}
}

// A byte changed in a stored row, by anything but the store, is reported
// when the row is read, naming the instance and the row, and never served.
func TestChangedRowIsReportedNotServed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, id := range []string{"good", "bad"} {
		flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: id, FlowID: "f", CreatedAt: time.Now()}, done) })
		flow.Wait(func(done func(error)) {
			s.Append(id, []flow.Event{storetest.StepEvent(1), storetest.StepEvent(2)}, done)
		})
		flow.Wait(func(done func(error)) { s.Append(id, []flow.Event{storetest.StepEvent(3)}, done) })
	}
	held := storetest.StepEvent(0)
	if err := flow.Wait(func(done func(error)) { s.Hold("bad", held, done) }); err != nil {
		t.Fatal(err)
	}
	raw := readRaw(t, path)
	for _, change := range []string{
		`UPDATE log SET events = replace(events, '"response":"ok"', '"response":"OK"') WHERE instance_id = 'bad' AND first_seq = 1`,
		`UPDATE held SET data = replace(data, '"response":"ok"', '"response":"OK"') WHERE instance_id = 'bad'`,
	} {
		if _, err := raw.Exec(change); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Events(ctx, "bad", 0)
	if want := `instance "bad": the row of events 1 to 2: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want || !errors.Is(err, flow.ErrCorrupt) {
		t.Errorf("events of a changed row: %v\nwant %s", err, want)
	}
	// The rows after it read as they were written.
	if events, err := s.Events(ctx, "bad", 2); err != nil || len(events) != 1 {
		t.Errorf("events after the changed row: %d, %v", len(events), err)
	}
	_, err = s.Held(ctx, "bad")
	if want := `instance "bad": held event 1: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want {
		t.Errorf("held: %v\nwant %s", err, want)
	}
	if events, err := s.Events(ctx, "good", 0); err != nil || len(events) != 3 {
		t.Errorf("the other instance: %d events, %v", len(events), err)
	}
	// A text is checked as the rows are.
	if _, err := raw.Exec(`UPDATE texts SET body = 'Be harmful.'`); err != nil {
		t.Fatal(err)
	}
	s2, err := sqlite.Open(path) // a store that has not read the text yet
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, err = s2.Events(ctx, "good", 0)
	if want := `instance "good": text 1: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want {
		t.Errorf("events with a changed text: %v\nwant %s", err, want)
	}
}
