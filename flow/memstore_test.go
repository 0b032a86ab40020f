package flow_test

import (
	"testing"

	"superego/flow"
	"superego/flow/storetest"
)

func TestMemStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) flow.Store { return &flow.MemStore{} })
}
