package engine

import (
	"fmt"
	"superego/flow"
)

// Request is a run to start.
type Request struct {
	FlowID     string
	InstanceID string // "" for a new instance
	Input      string
	// Prior, for a new instance, is its conversation before Input: user
	// and assistant messages, as a client that keeps the conversation sends
	// it whole with each message (OpenAI's chat completions). They become
	// the instance's first steps, written with the run's start, and its
	// nodes' models read them as the transcript.
	Prior   []flow.Step
	Options flow.RunOptions
	// Continue goes on with the instance's turn, with no new message: its
	// client's tool results (Options.Results) are in, or it is abandoned
	// (Options.Abandon). Input is unused.
	Continue bool
}

// size is the bytes of the request's input, its conversation's included.
func (req Request) size() int64 {
	n := int64(len(req.Input))
	for _, s := range req.Prior {
		n += int64(len(s.Response))
	}
	return n
}

// checkPrior checks the conversation before a request's input: only a
// new instance has one, of user and assistant messages and its client's
// instructions. A run here and one a replica takes check it alike.
func (req Request) checkPrior(isNew bool) error {
	for i, s := range req.Prior {
		client := s.Role == flow.RoleSystem && s.AgentID == flow.ClientInstructions
		if s.Role != flow.RoleUser && s.Role != flow.RoleAssistant && !client || !isNew {
			return fmt.Errorf("prior message %d: a new instance's messages are user or assistant ones, or its client's instructions: %w", i, flow.ErrInvalid)
		}
	}
	return nil
}
