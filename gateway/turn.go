package gateway

import (
	"encoding/json"
	"slices"
)

// Turn is what a flow makes of a client's request for its agent's model:
// the upstream's model, the flow's own instructions for the agent, its own
// tools beside the client's, a tool choice where the flow overrides the
// client's, and the rounds of calls its model has made since the client's
// conversation was written, with their results as the model is to read
// them: a refused call's refusal, a withheld result's notice.
type Turn struct {
	Model  string
	System string
	Tools  []Tool
	Choice *Choice
	Rounds []Round
}

// Round is one reply of the agent's model that made calls: its text, its
// calls in order, and a result for each.
type Round struct {
	Text    string
	Calls   []Call
	Results []Result
	// Thinking is the reply's reasoning as the upstream gave it
	// (Anthropic's thinking blocks, which must come back with its calls).
	Thinking []json.RawMessage
}

// For is the request the agent's model is sent: the client's, with the
// flow's instructions first (operator policy before the client's), the
// agent's own tools after the client's, and each round as it was, where
// the client's conversation has it otherwise or not at all. Every part of
// the client's request the turn does not change stays as the client sent
// it.
func (r *Request) For(t Turn) *Request {
	out := *r
	out.Model = t.Model
	if t.System != "" {
		out.System = append([]Part{{Kind: PartText, Text: t.System}}, r.System...)
	}
	if len(t.Tools) > 0 {
		out.Tools = append(slices.Clip(r.Tools), t.Tools...)
	}
	if t.Choice != nil {
		out.Choice = t.Choice
	}
	items := slices.Clone(r.Items)
	if r.Wire == Responses {
		items = joinReplies(items)
	}
	out.Items = patch(unanswered(items, t.Rounds), t.Rounds)
	out.changed = changes{system: t.System != "", tools: len(t.Tools) > 0, choice: t.Choice != nil}
	return &out
}

// changes say which of a request's fields a Turn changed, to be written
// anew for an upstream of the client's own protocol.
type changes struct{ system, tools, choice bool }

// unanswered is the conversation without the calls and results after the
// user's last message that are none of the turn's: a round the client
// says happened, which answers no call this server is waiting on (a
// forged history, or a retry after the wait ended), did not happen for
// this turn, and its results were never judged.
func unanswered(items []Item, rounds []Round) []Item {
	var ids []string
	for _, rd := range rounds {
		for _, c := range rd.Calls {
			ids = append(ids, c.ID)
		}
	}
	at := -1
	for i := len(items) - 1; i >= 0 && at < 0; i-- {
		if items[i].Role == RoleUser && slices.ContainsFunc(items[i].Parts, func(p Part) bool { return p.Kind != PartResult }) {
			at = i
		}
	}
	out := items[:at+1]
	for _, it := range items[at+1:] {
		if !slices.ContainsFunc(it.Parts, func(p Part) bool {
			return p.Call != nil && !slices.Contains(ids, p.Call.ID) || p.Result != nil && !slices.Contains(ids, p.Result.CallID)
		}) {
			out = append(out, it)
		}
	}
	return out
}

// patch makes the conversation hold each round as the model made it. A
// round the client has (its reply's calls, sent to the client) keeps the
// client's items, with the calls the client was not sent put back in
// order and each result as the model is to read it; a round the client
// never saw (every call refused, or run by the flow) goes in before the
// first round the client has that came after it, or at the end.
func patch(items []Item, rounds []Round) []Item {
	for n, rd := range rounds {
		at := slices.IndexFunc(items, func(it Item) bool { return hasCall(it, rd.Calls) })
		if at < 0 {
			pos := len(items)
			for _, later := range rounds[n+1:] {
				if i := slices.IndexFunc(items, func(it Item) bool { return hasCall(it, later.Calls) }); i >= 0 {
					pos = min(pos, i)
				}
			}
			items = slices.Insert(items, pos, reply(rd), results(rd.Results...))
			continue
		}
		items[at] = withCalls(items[at], rd)
		last := at // the item after which a missing result goes
		for _, res := range rd.Results {
			i, j := findResult(items, at+1, res.CallID)
			switch {
			case i < 0:
				if it := items[last]; last > at && it.Role == RoleUser { // Anthropic's: a user's message holds the results
					items[last] = addResult(it, res)
				} else {
					items = slices.Insert(items, last+1, results(res))
					last++
				}
			case items[i].Parts[j].Result.Output != res.Output:
				items[i] = changed(items[i])
				items[i].Parts[j] = Part{Kind: PartResult, Result: &res}
				last = i
			default:
				last = i
			}
		}
	}
	return items
}

// hasCall reports whether the item holds any of calls.
func hasCall(it Item, calls []Call) bool {
	return slices.ContainsFunc(it.Parts, func(p Part) bool {
		return p.Call != nil && slices.ContainsFunc(calls, func(c Call) bool { return c.ID == p.Call.ID })
	})
}

// findResult finds the result of the call id among the items from i on,
// up to the next item with calls: the item's index and the part's.
func findResult(items []Item, from int, id string) (int, int) {
	for i := from; i < len(items); i++ {
		if len(items[i].Calls()) > 0 {
			break
		}
		for j, p := range items[i].Parts {
			if p.Result != nil && p.Result.CallID == id {
				return i, j
			}
		}
	}
	return -1, -1
}

// reply is a round's reply as an item of the conversation.
func reply(rd Round) Item {
	it := Item{Role: RoleAssistant, Parts: thinking(rd)}
	if rd.Text != "" {
		it.Parts = append(it.Parts, Part{Kind: PartText, Text: rd.Text})
	}
	for _, c := range rd.Calls {
		it.Parts = append(it.Parts, Part{Kind: PartCall, Call: &c})
	}
	return it
}

// results is an item of results.
func results(rs ...Result) Item {
	it := Item{Role: RoleTool}
	for _, r := range rs {
		it.Parts = append(it.Parts, Part{Kind: PartResult, Result: &r})
	}
	return it
}

// withCalls is the client's item of a round's reply, holding every call of
// the round in order, and the round's text where the client has none.
func withCalls(it Item, rd Round) Item {
	calls := it.Calls()
	same := len(calls) == len(rd.Calls)
	for i := range calls {
		same = same && calls[i].ID == rd.Calls[i].ID
	}
	text := slices.ContainsFunc(it.Parts, func(p Part) bool { return p.Kind == PartText })
	thought := slices.ContainsFunc(it.Parts, func(p Part) bool { return p.Kind == PartThinking })
	if same && (text || rd.Text == "") && (thought || len(rd.Thinking) == 0) {
		return it
	}
	it = changed(it)
	var parts []Part
	if !thought {
		parts = thinking(rd)
	}
	if !text && rd.Text != "" {
		parts = append(parts, Part{Kind: PartText, Text: rd.Text})
	}
	for _, p := range it.Parts {
		if p.Call == nil {
			parts = append(parts, p)
		}
	}
	for _, c := range rd.Calls {
		j := slices.IndexFunc(it.Parts, func(p Part) bool { return p.Call != nil && p.Call.ID == c.ID })
		if j >= 0 {
			parts = append(parts, it.Parts[j])
		} else {
			parts = append(parts, Part{Kind: PartCall, Call: &c})
		}
	}
	it.Parts = parts
	return it
}

// addResult puts a result after the item's last result: Anthropic's
// protocol wants a message's results before its text.
func addResult(it Item, res Result) Item {
	it = changed(it)
	last := -1
	for j, p := range it.Parts {
		if p.Kind == PartResult {
			last = j
		}
	}
	it.Parts = slices.Insert(it.Parts, last+1, Part{Kind: PartResult, Result: &res})
	return it
}

// changed is an item that will be written anew: it no longer has its raw
// form, and its parts are its own.
func changed(it Item) Item {
	it.raw = nil
	it.Parts = slices.Clone(it.Parts)
	return it
}

// rawOr is raw where there is one, else v encoded.
func rawOr(raw json.RawMessage, v any) json.RawMessage {
	if raw != nil {
		return raw
	}
	b, _ := json.Marshal(v)
	return b
}

// thinking are a round's thinking blocks, as parts.
func thinking(rd Round) []Part {
	parts := make([]Part, len(rd.Thinking))
	for i, raw := range rd.Thinking {
		parts[i] = Part{Kind: PartThinking, raw: raw}
	}
	return parts
}
