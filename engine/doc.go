// Package engine runs flows. An Engine starts runs on instances, admits
// them within its limits, lets clients subscribe to their events, and
// resumes the runs a crash interrupted; its Executor runs one turn of an
// instance from node to node, holding an inner agent's turn until a
// superego has judged it, and writes every step and event to the store
// before anything is acted on.
//
// The engine knows nothing of language models or HTTP: it runs each node
// through the Agent interface, with a Task that says what the node is
// given, and reports what happens as events (package flow). A tool call an
// agent's model asks for goes through Calls, which decides it by the
// node's rules and judges before it runs.
package engine
