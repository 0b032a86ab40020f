package engine

import "superego/flow"

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
