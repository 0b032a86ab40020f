package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sync/atomic"
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

// peak is the moment the heap profile is taken at: every run of a round
// waiting on its last model call, each holding all its steps. Armed, it
// holds the calls of output superegos until released.
type peak struct {
	armed   atomic.Bool
	waiting atomic.Int64
	release chan struct{}
}

func (p *peak) hold(ctx context.Context) {
	p.waiting.Add(1)
	select {
	case <-p.release:
	case <-ctx.Done():
	}
}

// profiles are the profiles -profile asks for, written into dir.
type profiles struct {
	dir  string
	peak peak
}

// cpu starts a CPU profile named name; the function it returns stops it.
func (p *profiles) cpu(name string) (func(), error) {
	if p == nil {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(p.dir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// heapAtPeak runs round once more, holding each flow's last model call
// until all n flows wait on theirs; then it collects garbage, writes a
// heap profile and lets them go: what n runs in flight hold. It records
// under prefix the live heap and the goroutine stacks there, which,
// unlike a peak's RSS, do not depend on when the collector ran.
func (p *profiles) heapAtPeak(out map[string]any, prefix string, n int, round func() (time.Duration, error)) error {
	if p == nil {
		return nil
	}
	f, err := os.Create(filepath.Join(p.dir, prefix+"heap.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	p.peak.waiting.Store(0)
	p.peak.release = make(chan struct{})
	p.peak.armed.Store(true)
	defer p.peak.armed.Store(false)
	done := make(chan error, 1) // the round's result, read once it is let go
	go func() {
		_, err := round()
		done <- err
	}()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for p.peak.waiting.Load() < int64(n) {
		select {
		case err := <-done:
			return fmt.Errorf("heap profile: the round ended before its %d flows all waited: %v", n, err)
		case <-t.C:
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out[prefix+"held_heap_kb"], out[prefix+"held_stacks_kb"] = ms.HeapAlloc/1024, ms.StackInuse/1024
	err = pprof.Lookup("heap").WriteTo(f, 0)
	close(p.peak.release)
	return errors.Join(err, <-done)
}
