package experiment

import "superego/flow"

// ClientTools are the sample's tools as its runs offer them to the flow's
// client agent: a test that runs a sample's first request by hand sends
// what the lab sends.
func (s Sample) ClientTools() *flow.ClientTools { return s.client() }
