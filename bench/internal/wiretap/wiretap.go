// Package wiretap records what a fake model's HTTP wire carries, for the
// benchmarks: when each request came, when each write of its answer went
// out, and whether its client hung up before the end. agentstest's servers
// write and flush one event at a time, so a write is an event.
package wiretap

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Call is one request and its answer, as the wire saw them.
type Call struct {
	Body   []byte
	At     time.Time   // the request arrived
	Writes []time.Time // when each write of the answer went out
	End    time.Time   // the answer ended
	HungUp bool        // the client went away before the answer ended
}

// Tap keeps the calls of the handlers it wraps until they are taken. Its
// zero value is ready to use.
type Tap struct {
	mu       sync.Mutex
	idle     *sync.Cond // no call in flight
	inFlight int
	calls    []Call
}

// Wrap returns h, recorded.
func (t *Tap) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.mu.Lock()
		t.inFlight++
		t.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		c := Call{Body: body, At: time.Now()}
		tw := &timedWriter{ResponseWriter: w}
		h.ServeHTTP(tw, r)
		c.End, c.Writes, c.HungUp = time.Now(), tw.at, r.Context().Err() != nil
		t.mu.Lock()
		defer t.mu.Unlock()
		t.calls = append(t.calls, c)
		if t.inFlight--; t.inFlight == 0 {
			t.cond().Broadcast()
		}
	})
}

// Take waits until no call is in flight, then returns the calls recorded
// since the last Take, in the order they ended.
func (t *Tap) Take() []Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.inFlight > 0 {
		t.cond().Wait()
	}
	c := t.calls
	t.calls = nil
	return c
}

// cond is idle, made on first use; t.mu is held.
func (t *Tap) cond() *sync.Cond {
	if t.idle == nil {
		t.idle = sync.NewCond(&t.mu)
	}
	return t.idle
}

type timedWriter struct {
	http.ResponseWriter
	at []time.Time
}

func (w *timedWriter) Write(b []byte) (int, error) {
	w.at = append(w.at, time.Now())
	return w.ResponseWriter.Write(b)
}

func (w *timedWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// JudgesAlone is how long judges' calls were in flight with no agent
// call: what the judges added to a request's critical path. A judge's
// call is one whose body carries a superego's system prompt.
func JudgesAlone(calls []Call) time.Duration {
	type span struct{ from, to time.Time }
	var judges, agent []span
	var edges []time.Time
	for _, c := range calls {
		s := span{c.At, c.End}
		if strings.Contains(string(c.Body), "Your node: ") { // a superego's system prompt
			judges = append(judges, s)
		} else {
			agent = append(agent, s)
		}
		edges = append(edges, s.from, s.to)
	}
	slices.SortFunc(edges, func(a, b time.Time) int { return a.Compare(b) })
	in := func(spans []span, t time.Time) bool {
		return slices.ContainsFunc(spans, func(s span) bool { return !t.Before(s.from) && t.Before(s.to) })
	}
	var d time.Duration
	for i := 1; i < len(edges); i++ {
		if mid := edges[i-1].Add(edges[i].Sub(edges[i-1]) / 2); in(judges, mid) && !in(agent, mid) {
			d += edges[i].Sub(edges[i-1])
		}
	}
	return d
}
