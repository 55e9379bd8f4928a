package schema_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

// benchObject is a corpus object and how to make a distinct copy of it: every replacement
// of variants, with %d replaced by a number, makes the copies differ wherever a cache of
// results could recognise them.
type benchObject struct {
	name, file string
	variants   []string // pairs: old, new (with %d)
}

var benchObjects = []benchObject{
	{"SandboxPool", "pool-override.yaml", []string{
		`"sandbox-pool.io/class":"default"`, `"sandbox-pool.io/class":"default-%d"`,
	}},
	// Every status member but the phase differs from copy to copy.
	{"SandboxPoolWithStatus", "pool-full-status.yaml", []string{
		`"sandbox-pool.io/class":"default"`, `"sandbox-pool.io/class":"default-%d"`,
		`"2026-11-29T`, `"%04d-11-29T`,
		`"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":%d`,
		`"uid":"7c0f6d8e`, `"uid":"%08x`,
		`"source":"Class"`, `"source":"Class","reason":"copy %d"`,
		`"lastAppliedGeneration":2`, `"lastAppliedGeneration":%d`,
	}},
	{"SandboxPoolClass", "class-default.yaml", []string{
		`"sandbox.agentcube.io/pool":"default"`, `"sandbox.agentcube.io/pool":"default-%d"`,
	}},
}

// copies numbers the copies of every benchmark in the process, so that no benchmark (or
// a repeat of it with -count) meets a copy an earlier one left in the schema's cache.
var copies atomic.Int64

// copyMaker returns a function that makes a new distinct copy of o's JSON each call.
func copyMaker(b *testing.B, o benchObject) (corpus.Object, func() []byte) {
	obj, err := corpus.Find(o.file)
	if err != nil {
		b.Fatal(err)
	}
	in := string(obj.JSON)
	for j := 0; j < len(o.variants); j += 2 {
		if !strings.Contains(in, o.variants[j]) {
			b.Fatalf("%s has no %s", o.file, o.variants[j])
		}
	}
	return obj, func() []byte {
		i := int(copies.Add(1))
		out := in
		for j := 0; j < len(o.variants); j += 2 {
			n := i
			if strings.Contains(o.variants[j+1], "%04d") {
				n = 2000 + i%8000 // a valid year
			}
			out = strings.ReplaceAll(out, o.variants[j], fmt.Sprintf(o.variants[j+1], n))
		}
		return []byte(out)
	}
}

// BenchmarkDefault measures validate + default of one object with the compiled schema, a
// different object every time (as the webhook sees pool CREATEs), so no result comes from
// the schema's cache: what CUE itself costs. The copy of the object is made inside the
// loop (a few µs). CUE has regressed badly between releases; this guards the pinned
// version.
func BenchmarkDefault(b *testing.B) {
	s, err := schema.Compiled()
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range benchObjects {
		obj, next := copyMaker(b, o)
		b.Run(o.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Default(schema.Kind(obj.Kind), next()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDefaultUnchanged is Default of the same object again and again: an idle agent's
// pass over its pool, the controller's snapshot of a class that did not change.
func BenchmarkDefaultUnchanged(b *testing.B) {
	s, err := schema.Compiled()
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range benchObjects {
		obj, err := corpus.Find(o.file)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(o.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Default(schema.Kind(obj.Kind), obj.JSON); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDefaultStatusFigure is the agent's pass after its most common write: the pool
// with a full status in which one node-ctl figure (status.poolInfo.allocatedMemoryBytes)
// differs every time.
func BenchmarkDefaultStatusFigure(b *testing.B) {
	s, err := schema.Compiled()
	if err != nil {
		b.Fatal(err)
	}
	obj, next := copyMaker(b, benchObject{"", "pool-full-status.yaml", []string{
		`"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":%d`,
	}})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Default(schema.Kind(obj.Kind), next()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDefaultParallel is BenchmarkDefault for a pool from GOMAXPROCS goroutines at
// once, as the webhook calls it; compare its ns/op with the serial figure to see how the
// evaluator pool scales.
func BenchmarkDefaultParallel(b *testing.B) {
	s, err := schema.Compiled()
	if err != nil {
		b.Fatal(err)
	}
	obj, next := copyMaker(b, benchObjects[0])
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Default(schema.Kind(obj.Kind), next()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
