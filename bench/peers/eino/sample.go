package main

// The same sampler as bench/guarded_calculator's, so that both engines'
// maxima are read alike.

import (
	"runtime/metrics"
	"time"
)

// sampled are the runtime's figures the sampler follows, and the keys
// their maxima get in the JSON line.
var sampled = []struct{ metric, key string }{
	{"/gc/heap/live:bytes", "max_heap_live_kb"}, // marked live by the last collection
	{"/memory/classes/heap/objects:bytes", "max_heap_objects_kb"},
	{"/memory/classes/heap/stacks:bytes", "max_stacks_kb"},
	{"/memory/classes/total:bytes", "max_runtime_total_kb"},
	{"/sched/goroutines:goroutines", "max_goroutines"},
}

// sampler reads sampled every few milliseconds, from start to finish, and
// keeps each one's maximum: what a round held at its peak, which the heap
// profile (taken after a collection) and VmHWM (pages, not objects) do not
// tell apart.
type sampler struct {
	stop, done chan struct{}
	max        []uint64
}

func sample(every time.Duration) *sampler {
	if every <= 0 {
		return nil
	}
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), max: make([]uint64, len(sampled))}
	read := make([]metrics.Sample, len(sampled))
	for i, m := range sampled {
		read[i].Name = m.metric
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			metrics.Read(read)
			for i, r := range read {
				s.max[i] = max(s.max[i], r.Value.Uint64())
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops the sampler and records its maxima under prefix.
func (s *sampler) finish(out map[string]any, prefix string) {
	if s == nil {
		return
	}
	close(s.stop)
	<-s.done
	for i, m := range sampled {
		v := s.max[i]
		if m.key != "max_goroutines" {
			v /= 1024
		}
		out[prefix+m.key] = v
	}
}
