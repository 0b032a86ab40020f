// Package backoff is how superego waits before trying again: a wait that
// doubles from a first one up to a longest (Doubling), and, for model
// providers, a transport that waits out their 429 answers (Transport).
// Serving and experiments call models through the same transport; MCP
// servers that fail are started again on the same doubling.
package backoff

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Transport is an http.RoundTripper for model providers that waits out a
// 429 instead of failing the call: it waits as long as the answer's
// Retry-After says (seconds, or an HTTP date), or, without one, a second
// doubling at each 429 in a row up to MaxWait, then sends the request
// again. While it waits, every request to the same host waits too, so
// that an experiment's concurrent runs slow down together instead of
// each meeting the limit in turn. A wait longer than what is left of the
// request's context (the call's timeout) returns the 429, and the call
// fails as before. Other answers, 5xx included, pass through: a provider
// error fails its run, which an experiment counts apart.
//
// The zero value is ready and uses http.DefaultTransport.
type Transport struct {
	Next    http.RoundTripper
	MaxWait time.Duration // 0: 60s
	Retries int           // 429s waited out for one request; 0: 8

	mu    sync.Mutex
	hosts map[string]*hostState
	waits atomic.Int64
}

type hostState struct {
	until  time.Time // no request to the host before
	streak int       // 429s in a row without Retry-After
}

// Waits counts the 429 answers waited out so far.
func (b *Transport) Waits() int64 { return b.waits.Load() }

// RoundTrip sends req, waiting out 429s.
func (b *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	next := b.Next
	if next == nil {
		next = http.DefaultTransport
	}
	retries := b.Retries
	if retries <= 0 {
		retries = 8
	}
	host := req.URL.Host
	for attempt := 0; ; attempt++ {
		if err := sleep(req.Context(), time.Until(b.pausedUntil(host))); err != nil {
			return nil, err
		}
		resp, err := next.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			if err == nil {
				b.succeeded(host)
			}
			return resp, err
		}
		wait := b.pause(host, resp.Header.Get("Retry-After"))
		deadline, hasDeadline := req.Context().Deadline()
		if attempt >= retries || req.GetBody == nil && req.Body != nil && req.Body != http.NoBody ||
			hasDeadline && time.Now().Add(wait).After(deadline) {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		b.waits.Add(1)
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

func (b *Transport) state(host string) *hostState {
	if b.hosts == nil {
		b.hosts = map[string]*hostState{}
	}
	s := b.hosts[host]
	if s == nil {
		s = &hostState{}
		b.hosts[host] = s
	}
	return s
}

func (b *Transport) pausedUntil(host string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state(host).until
}

func (b *Transport) succeeded(host string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state(host).streak = 0
}

// pause holds the host's requests for as long as a 429 asks, and returns
// that wait.
func (b *Transport) pause(host, retryAfter string) time.Duration {
	max := b.MaxWait
	if max <= 0 {
		max = time.Minute
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state(host)
	wait, ok := parseRetryAfter(retryAfter, time.Now())
	if !ok {
		wait = Doubling(time.Second, max, s.streak)
		s.streak++
	}
	wait = min(wait, max)
	if until := time.Now().Add(wait); until.After(s.until) {
		s.until = until
	}
	return time.Until(s.until)
}

// parseRetryAfter reads Retry-After: delay-seconds or an HTTP date
// (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Doubling is the wait before trying again after n failures in a row
// (n from 0): first, twice as long after each failure, at most longest.
func Doubling(first, longest time.Duration, n int) time.Duration {
	return min(first<<min(n, 30), longest)
}
