package flow

import "encoding/json"

// Decide is what the permissions say of a call, for tests: arguments that
// do not decode are refused as the executor refuses them.
func Decide(p *Permissions, tool string, input json.RawMessage) Ruling {
	_, args, err := decodeArguments(input, nil)
	if err != nil {
		return Ruling{EffectDeny, "invalid arguments: " + err.Error()}
	}
	return p.decide(tool, args)
}

// DecodeArguments is decodeArguments, for tests.
var DecodeArguments = decodeArguments

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
