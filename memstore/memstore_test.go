package memstore_test

import (
	"testing"

	"superego/flow"
	"superego/flow/storetest"
	"superego/memstore"
)

func TestMemStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) flow.Store { return &memstore.Store{} })
}

func BenchmarkAppendConcurrent(b *testing.B) { storetest.AppendConcurrent(b, &memstore.Store{}) }
