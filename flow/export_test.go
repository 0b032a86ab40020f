package flow

import "encoding/json"

// Decide is what the permissions say of a call, for tests.
func Decide(p *Permissions, tool string, input json.RawMessage) Ruling { return p.decide(tool, input) }
