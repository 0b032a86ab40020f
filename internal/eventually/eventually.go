// Package eventually is how superego's tests wait for what another
// goroutine or process does, where there is no event to wait on: a check
// polled until it holds, within a bound that fails the test.
package eventually

import (
	"testing"
	"time"
)

// Holds calls check until it returns "", first at once, then at waits
// that double from a millisecond to 50 ms. check returns what does not hold
// yet; where within passes first, that fails t.
func Holds(t testing.TB, within time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, why)
		}
		time.Sleep(wait)
	}
}
