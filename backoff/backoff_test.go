package backoff

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestDoubling(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// roundTrip is an http.RoundTripper of a function: a provider in the
// test's own goroutines, so that a synctest bubble holds all of it.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// provider answers 429 with retryAfter (none where "") to the first
// refusals requests, then 200, and records when each request came, from
// the bubble's start.
func provider(refusals int, retryAfter string) (*[]time.Duration, roundTrip) {
	var mu sync.Mutex
	var at []time.Duration
	start := time.Now()
	return &at, func(*http.Request) (*http.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Since(start))
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}"))}
		if refusals > 0 {
			refusals--
			resp.StatusCode = http.StatusTooManyRequests
			if retryAfter != "" {
				resp.Header.Set("Retry-After", retryAfter)
			}
		}
		return resp, nil
	}
}

func post(t *testing.T, ctx context.Context, tr *Transport) *http.Response {
	req, err := http.NewRequestWithContext(ctx, "POST", "http://provider.test/v1/chat/completions", strings.NewReader(`{"model": "m"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// The transport waits out 429s on the clock: as long as Retry-After says,
// or a second doubling without one; a request that starts while the host
// is paused waits with it; and a wait past the call's deadline returns the
// 429 at once. The waits run on synctest's clock, so each is exact.
func TestTransportWaitsOutRateLimits(t *testing.T) {
	t.Parallel()
	t.Run("retry-after", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			at, next := provider(2, "3")
			tr := &Transport{Next: next}
			if resp := post(t, t.Context(), tr); resp.StatusCode != 200 || tr.Waits() != 2 {
				t.Errorf("%d after %d waits", resp.StatusCode, tr.Waits())
			}
			if want := []time.Duration{0, 3 * time.Second, 6 * time.Second}; !slices.Equal(*at, want) {
				t.Errorf("requests at %v, want %v", *at, want)
			}
		})
	})
	t.Run("doubling", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			at, next := provider(3, "")
			tr := &Transport{Next: next}
			post(t, t.Context(), tr)
			if want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}; !slices.Equal(*at, want) {
				t.Errorf("requests at %v, want %v", *at, want)
			}
		})
	})
	t.Run("the host waits together", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			at, next := provider(1, "3")
			tr := &Transport{Next: next}
			var wg sync.WaitGroup
			wg.Go(func() { post(t, t.Context(), tr) })
			time.Sleep(time.Second)
			post(t, t.Context(), tr) // the host is paused until 3 s
			wg.Wait()
			if want := []time.Duration{0, 3 * time.Second, 3 * time.Second}; !slices.Equal(*at, want) {
				t.Errorf("requests at %v, want %v", *at, want)
			}
		})
	})
	t.Run("past the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			at, next := provider(1, "5")
			tr := &Transport{Next: next}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			start := time.Now()
			if resp := post(t, ctx, tr); resp.StatusCode != http.StatusTooManyRequests || time.Since(start) != 0 || len(*at) != 1 {
				t.Errorf("%d after %s, %d requests", resp.StatusCode, time.Since(start), len(*at))
			}
		})
	})
}
