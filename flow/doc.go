// Package flow is what a superego flow is and what its runs leave behind:
// flow definitions and their validation, the node graph with its
// transitions and iteration caps, permission rules and constitution stacks,
// the options a run is started with, and the append-only log of an
// instance: its steps and events, and the Store that keeps them. Package
// engine runs flows; this package knows nothing of running them.
//
// A flow is a graph of nodes. A superego node judges a message against a
// constitution; an inner agent does the work, possibly with tools. Each node
// run ends in a decision, and the node's transitions map that decision to the
// next node, to the same node ("self"), or to the end of the run (null).
//
// Hidden fields of a step (Thinking, AgentGuidance) have no JSON encoding, so
// no encoder can send them anywhere by accident; the next node receives the
// guidance through the task the engine gives it.
package flow
