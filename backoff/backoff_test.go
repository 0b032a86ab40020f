package backoff

import (
	"testing"
	"time"
)

func TestDoubling(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{0, 500 * time.Millisecond}, {1, time.Second}, {3, 4 * time.Second}, {6, 30 * time.Second}, {1000, 30 * time.Second}} {
		if got := Doubling(500*time.Millisecond, 30*time.Second, c.n); got != c.want {
			t.Errorf("after %d failures: %s, want %s", c.n, got, c.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{{"3", 3 * time.Second, true}, {"0.5", 500 * time.Millisecond, true}, {"Fri, 27 Nov 2026 12:00:07 GMT", 7 * time.Second, true},
		{"", 0, false}, {"soon", 0, false}, {"-1", 0, false}} {
		if got, ok := parseRetryAfter(c.v, now); got != c.want || ok != c.ok {
			t.Errorf("%q: %s %v, want %s %v", c.v, got, ok, c.want, c.ok)
		}
	}
}
