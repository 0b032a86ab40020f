package eventually

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestHoldsPollsUntilTheCheckHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		time.Sleep(20 * time.Millisecond)
		n.Store(1)
	}()
	calls := 0
	Holds(t, 10*time.Second, func() string {
		calls++
		if n.Load() == 0 {
			return "not yet"
		}
		return ""
	})
	if calls < 2 {
		t.Errorf("the check was called %d times: it held before the store", calls)
	}
}

// recorder is a testing.TB that keeps what Fatalf was told.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

func TestHoldsFailsWithWhatDidNotHold(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != any(r) {
				panic(p)
			}
		}()
		Holds(r, 30*time.Millisecond, func() string { return "3 leases" })
	}()
	if r.failed != "after 30ms: 3 leases" {
		t.Errorf("failed with %q", r.failed)
	}
}
