package experiment

import (
	"context"
	"testing"
)

// A watcher that stops reading is dropped once it is watchBuffer events
// behind: its channel ends, and the events after it go to the others
// without stopping on it (a send on its closed channel would take the
// process down).
func TestAWatcherThatFallsBehindIsDropped(t *testing.T) {
	t.Parallel()
	r := &run{watches: map[*Watch]struct{}{}}
	l := &Lab{runs: map[string]*run{"x": r}}
	slow, err := l.Subscribe(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	for range watchBuffer + 10 {
		r.mu.Lock()
		r.broadcast(Event{Name: EventProgress, Data: r.snapshot()})
		r.mu.Unlock()
	}
	n := 0
	for range slow.C {
		n++
	}
	r.mu.Lock()
	left := len(r.watches)
	r.mu.Unlock()
	if n != watchBuffer || left != 0 {
		t.Errorf("the slow watcher got %d events before its end; %d watchers left", n, left)
	}
}
