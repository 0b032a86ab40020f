package main

import (
	"io"
	"testing"
)

// One round of the bench, without the SDK, runs and its checks hold both
// ways: ours and the naive loop run every call, each after its one verdict;
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
		mode                 string
		unjudged, judgements int
	}{{"a_superego", 0, calls}, {"b_naive", 0, calls}, {"control", calls, 0}} {
		ss := res.samples[c.mode]
		if len(ss) != 1 || ss[0].ran != calls || ss[0].unjudged != c.unjudged || ss[0].judgements != c.judgements {
			t.Errorf("%s: %+v; want %d calls run, %d unjudged, %d judgements", c.mode, ss, calls, c.unjudged, c.judgements)
		}
	}
	if _, ok := res.samples["c_agents_sdk"]; ok || res.skipped == "" {
		t.Errorf("the SDK ran with no -sdk, or its skip was not said (%q)", res.skipped)
	}
	report(io.Discard, res)
}
