// Package flow is the superego flow engine: flow definitions and their
// validation, the node graph with its transitions and iteration caps, the
// append-only step records of an instance, and the executor that runs one
// turn of an instance and streams its events.
//
// A flow is a graph of nodes. A superego node judges a message against a
// constitution; an inner agent does the work, possibly with tools. Each node
// run ends in a decision, and the node's transitions map that decision to the
// next node, to the same node ("self"), or to the end of the run (null).
//
// The package knows nothing of language models or HTTP: it runs nodes through
// the Agent interface and reports what happens as Events. Hidden fields of a
// step (Thinking, AgentGuidance) have no JSON encoding, so no encoder can
// send them anywhere by accident; the next node receives the guidance through
// the Task it is given.
package flow
