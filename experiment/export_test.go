package experiment

import (
	"context"

	"superego/flow"
)

// ClientTools are the sample's tools as its runs offer them to the flow's
// client agent: a test that runs a sample's first request by hand sends
// what the lab sends.
func (s Sample) ClientTools() *flow.ClientTools { return s.client() }

// MakeReport makes the experiment's report from its outcomes, as a report
// kept or served was made.
func (l *Lab) MakeReport(ctx context.Context, id string) (*Report, error) {
	rec, plan, err := l.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return l.makeReport(ctx, rec, plan)
}
