package experiment

import (
	"maps"
	"slices"
	"strings"

	"superego/flow"
)

// NodeProvenance is what a condition's node ran on (docs/experiments.md): the
// provider and model as the node asked for it ("openai:gpt-4o-mini"), the
// model as the provider named it in its replies (none where it named
// none), the sampling parameters its calls sent, each null where they
// sent none, and a superego's constitution. Parameters is null for a node
// that made no call.
type NodeProvenance struct {
	Provider     string           `json:"provider,omitempty"`
	Model        string           `json:"model,omitempty"`
	ServedModels []string         `json:"served_models,omitempty"`
	Parameters   *flow.Parameters `json:"parameters"`
	Constitution *Constitution    `json:"constitution,omitempty"`
}

// Cost is a condition's tokens, node by node, and what they cost as if
// the condition ran alone: at the experiment's prices, every token its
// runs took, whoever paid for the call. USD is null where a node's model
// has no price (Unpriced names them); the built-in offline model costs
// nothing.
type Cost struct {
	Nodes    map[string]NodeCost `json:"nodes"`
	USD      *float64            `json:"usd"`
	Unpriced []string            `json:"unpriced,omitempty"`
}

// NodeCost is a node's tokens: of the condition's own calls, of replies
// the reply cache served, of calls in flight for another run that it
// shared; and their price.
type NodeCost struct {
	Model  string   `json:"model"`
	Own    Tokens   `json:"own"`
	Cached Tokens   `json:"cached"`
	Shared Tokens   `json:"shared"`
	USD    *float64 `json:"usd"`
}

// usage gathers a condition's outcomes' models and tokens, by node.
type usage struct{ nodes map[string]*nodeUsage }

type nodeUsage struct {
	model               string
	served              map[string]bool
	params              *flow.Parameters
	all, cached, shared Tokens
}

func (u *usage) node(name string) *nodeUsage {
	if u.nodes == nil {
		u.nodes = map[string]*nodeUsage{}
	}
	if u.nodes[name] == nil {
		u.nodes[name] = &nodeUsage{served: map[string]bool{}}
	}
	return u.nodes[name]
}

func (u *usage) add(o *Outcome) {
	for name, m := range o.Models {
		n := u.node(name)
		n.model = m.Model
		if m.ServedModel != "" {
			n.served[m.ServedModel] = true
		}
		if m.Parameters != nil {
			n.params = m.Parameters
		}
	}
	for name, t := range o.Tokens {
		n := u.node(name)
		n.all = sum(n.all, t)
		n.cached = sum(n.cached, o.CachedTokens[name])
		n.shared = sum(n.shared, o.SharedTokens[name])
	}
}

func sum(a, b Tokens) Tokens { return Tokens{a.Prompt + b.Prompt, a.Completion + b.Completion} }

// provenance is each node's, with c's superegos' constitutions.
func (u *usage) provenance(c Planned) map[string]NodeProvenance {
	out := map[string]NodeProvenance{}
	for name, n := range u.nodes {
		if n.model == "" {
			continue
		}
		out[name] = NodeProvenance{Provider: providerOf(n.model), Model: n.model, ServedModels: slices.Sorted(maps.Keys(n.served)), Parameters: n.params}
	}
	for name, k := range c.Judges {
		p := out[name]
		p.Constitution = &k
		out[name] = p
	}
	return out
}

// cost prices the tokens at prices.
func (u *usage) cost(prices map[string]Price) Cost {
	c := Cost{Nodes: map[string]NodeCost{}}
	total, priced := 0.0, true
	for _, name := range slices.Sorted(maps.Keys(u.nodes)) {
		n := u.nodes[name]
		own := Tokens{n.all.Prompt - n.cached.Prompt - n.shared.Prompt, n.all.Completion - n.cached.Completion - n.shared.Completion}
		nc := NodeCost{Model: n.model, Own: own, Cached: n.cached, Shared: n.shared}
		price, ok := prices[n.model]
		if providerOf(n.model) == "offline" {
			price, ok = Price{}, true
		}
		switch {
		case ok:
			usd := (float64(n.all.Prompt)*price.Input + float64(n.all.Completion)*price.Output) / 1e6
			nc.USD, total = &usd, total+usd
		case n.all != (Tokens{}):
			priced = false
			if !slices.Contains(c.Unpriced, n.model) {
				c.Unpriced = append(c.Unpriced, n.model)
			}
		}
		c.Nodes[name] = nc
	}
	if priced {
		c.USD = &total
	}
	return c
}

// providerOf is the provider of a model as steps name it: "openai" of
// "openai:gpt-4o-mini", "offline" of the built-in model's name.
func providerOf(model string) string {
	provider, _, _ := strings.Cut(model, ":")
	provider, _, _ = strings.Cut(provider, " ")
	return provider
}
