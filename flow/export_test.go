package flow

import "encoding/json"

// Decide is what the permissions say of a call, for tests: arguments that
// do not decode are refused as the executor refuses them.
func Decide(p *Permissions, tool string, input json.RawMessage) Ruling {
	_, args, err := DecodeArguments(input, nil)
	if err != nil {
		return Ruling{EffectDeny, "invalid arguments: " + err.Error()}
	}
	return p.Decide(tool, args)
}
