// Package gateway speaks the model APIs agent frameworks are written
// against: OpenAI's Chat Completions and Responses, and Anthropic's
// Messages. A client's request is read once into a Request, which holds
// what every one of them can say (instructions, a conversation of
// messages, tool calls and tool results, function tools, generation
// parameters), and keeps each part as the client sent it. From a Request
// the package writes the request an upstream model is sent: the client's
// own body, changed only where judgement requires, when the upstream
// speaks the client's protocol; a translation otherwise. It reads the
// upstream's answer, streamed or whole, into a Reply, and writes replies
// back in the client's protocol.
//
// The package knows nothing of flows or judges: what a judge refused or
// withheld reaches it as the rounds of a Turn (Request.For), and what a
// run answers as a Reply.
package gateway
