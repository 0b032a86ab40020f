package engine_test

import (
	"testing"

	"superego/flow"
	"superego/flow/storetest"
)

// A run's log and its events share step records; the tests' runs check
// that none changes once in an event (storetest.Records). The check is a
// check: a record changed after it was seen fails it.
func TestRecordsSeeAChangedRecord(t *testing.T) {
	t.Parallel()
	s := &flow.Step{StepID: "1", Response: "hi", Thinking: "T"}
	var r storetest.Records
	r.See(flow.Event{Name: flow.EventCompleteStep, Data: s})
	s.Thinking = "changed"
	var f failures
	r.Check(&f)
	if f.n != 1 {
		t.Errorf("a changed hidden field: %d failures, want 1", f.n)
	}
}

// failures is a testing.TB that counts the failures it is told of.
type failures struct {
	testing.TB
	n int
}

func (f *failures) Helper()               {}
func (f *failures) Errorf(string, ...any) { f.n++ }
