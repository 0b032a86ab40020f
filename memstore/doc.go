// Package memstore keeps instances and their event logs in memory, for
// tests, benchmarks and a server that needs nothing to outlive it.
package memstore
