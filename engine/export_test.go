package engine

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
