package main

import (
	"io"
	"testing"
)

// One round of the bench, without the SDK, runs and its checks hold both
// ways: ours and the naive loop run every call, each after its verdict;
// the control, ours with no judge, runs every call and every one is
// counted unjudged, so the check can fail. No time is asserted.
func TestOneRound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench's workload: about 3 s")
	}
	res, err := run(config{rounds: 1, store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode     string
		unjudged int
	}{{"a_superego", 0}, {"b_naive", 0}, {"control", calls}} {
		ss := res.samples[c.mode]
		if len(ss) != 1 || ss[0].ran != calls || ss[0].unjudged != c.unjudged {
			t.Errorf("%s: %+v; want %d calls run, %d unjudged", c.mode, ss, calls, c.unjudged)
		}
	}
	if _, ok := res.samples["c_agents_sdk"]; ok || res.skipped == "" {
		t.Errorf("the SDK ran with no -sdk, or its skip was not said (%q)", res.skipped)
	}
	report(io.Discard, res)
}
