package api

import (
	"slices"
	"sync"

	"superego/flow"
)

// callIndex remembers which instance each call this process sent a /v1
// client belongs to (docs/gateway.md), so that the request with the call's result
// finds its instance at once, instead of reading every instance of the
// flow that waits (waitingFor). It is a hint: the instance it names is
// checked against its log, and a call it has not seen (sent before a
// restart, by another replica, or forgotten) is looked for as before. It
// forgets in generations: it holds between gen and 2×gen calls.
type callIndex struct {
	mu       sync.Mutex
	cur, old map[string]sentCall
}

type sentCall struct{ flow, instance string }

const callIndexGen = 1 << 14

// add notes the calls a run of the flow sent its client.
func (x *callIndex) add(flowID, instance string, calls []flow.ToolCall) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range calls {
		if len(x.cur) >= callIndexGen || x.cur == nil {
			x.old, x.cur = x.cur, make(map[string]sentCall)
		}
		x.cur[c.ToolCallID] = sentCall{flowID, instance}
	}
}

// instances are the instances of the flow that the results' calls were
// sent from, and whether the index knows any of the calls.
func (x *callIndex) instances(flowID string, results []flow.ClientResult) (ids []string, known bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range results {
		c, ok := x.cur[r.ToolCallID]
		if !ok {
			c, ok = x.old[r.ToolCallID]
		}
		if !ok {
			continue
		}
		known = true
		if c.flow == flowID && !slices.Contains(ids, c.instance) {
			ids = append(ids, c.instance)
		}
	}
	return ids, known
}
