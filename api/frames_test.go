package api

import (
	"strings"
	"sync"
	"testing"

	"superego/flow"
)

// While more than one stream follows an instance, each of its frames is
// encoded once and the streams share it; once no other stream follows it,
// its small frames are let go, and only large ones stay cached.
func TestFramesOfAnInstanceFollowedTwiceAreEncodedOnce(t *testing.T) {
	t.Parallel()
	var c frameCache
	step := flow.Event{ID: 3, Name: flow.EventCompleteStep, Data: &flow.Step{StepID: "2", AgentID: "in", Role: flow.RoleAssistant, Response: "ok"}}
	big := flow.Event{ID: 4, Name: flow.EventCompleteStep, Data: &flow.Step{StepID: "3", AgentID: "in", Role: flow.RoleAssistant, Response: strings.Repeat("x", minCached)}}
	same := func(a, b []byte) bool { return &a[0] == &b[0] }

	alone := c.follow("i")
	a, _ := c.get("i", step)
	b, _ := c.get("i", step)
	if same(a, b) || len(c.byKey) != 0 {
		t.Fatalf("one stream's small frames were kept (%d kept)", len(c.byKey))
	}

	second := c.follow("i")
	frames := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range frames {
		wg.Go(func() {
			var err error
			if frames[i], err = c.get("i", step); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, f := range frames[1:] {
		if !same(f, frames[0]) {
			t.Fatal("streams of one instance got frames encoded apart")
		}
	}
	if string(frames[0]) != string(a) {
		t.Errorf("shared frame %q, alone %q", frames[0], a)
	}
	x, _ := c.get("i", big)
	if y, _ := c.get("j", step); len(c.byKey) != 2 || same(y, frames[0]) {
		t.Errorf("%d frames kept; another instance's frame shared: %v", len(c.byKey), same(y, frames[0]))
	}

	second()
	if len(c.byKey) != 1 || c.size != len(x) {
		t.Errorf("after the second stream left: %d frames, %d bytes kept", len(c.byKey), c.size)
	}
	alone()
	if z, _ := c.get("i", big); !same(x, z) || len(c.followers) != 0 {
		t.Errorf("a large frame was encoded again (%v), or followers stayed: %v", !same(x, z), c.followers)
	}
}
