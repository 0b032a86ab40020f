// Package agents runs flow nodes on language models through langchaingo:
// the superego, which judges a message against its constitution, and the
// inner agent, which does the work with tools. It implements engine.Agent.
//
// The model protocol (docs/flows.md): tools through the provider's native tool
// calling, otherwise one JSON object {thinking, decision, agent_guidance,
// response}, of which only the response is streamed to the client as it
// arrives.
package agents
