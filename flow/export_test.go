package flow

import "encoding/json"

// Decide is what the permissions say of a call, for tests.
func Decide(p *Permissions, tool string, input json.RawMessage) Ruling { return p.decide(tool, input) }

// LiveEvents is how many delivered events the instance's live run keeps
// for its subscribers; -1 when it has no live run.
func LiveEvents(e *Engine, id string) int {
	e.mu.Lock()
	run := e.live[id]
	e.mu.Unlock()
	if run == nil {
		return -1
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	return len(run.log)
}
