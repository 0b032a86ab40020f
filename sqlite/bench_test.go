package sqlite_test

import (
	"testing"

	"superego/flow"
	"superego/flow/storetest"
	"superego/memstore"
)

func BenchmarkAppend(b *testing.B)           { storetest.Append(b, open(b)) }
func BenchmarkAppendConcurrent(b *testing.B) { storetest.AppendConcurrent(b, open(b)) }

// stores are memory and SQLite, side by side.
var stores = []storetest.Store{
	{Name: "memory", Open: func(testing.TB) flow.Store { return &memstore.Store{} }},
	{Name: "sqlite", Open: func(b testing.TB) flow.Store { return open(b) }},
}

func BenchmarkEngine(b *testing.B) { storetest.Engine(b, stores) }
