// The benchmarks of sqlite/bench_test.go, on PostgreSQL: run them
// interleaved with those to compare (docs/benchmarks.md).
package postgres_test

import (
	"testing"

	"superego/flow"
	"superego/flow/storetest"
)

func BenchmarkAppend(b *testing.B)           { storetest.Append(b, open(b)) }
func BenchmarkAppendConcurrent(b *testing.B) { storetest.AppendConcurrent(b, open(b)) }

// stores are PostgreSQL alone: sqlite's benchmarks give memory and SQLite.
var stores = []storetest.Store{
	{Name: "postgres", Open: func(b testing.TB) flow.Store { return open(b) }},
}

func BenchmarkEngine(b *testing.B) { storetest.Engine(b, stores) }
