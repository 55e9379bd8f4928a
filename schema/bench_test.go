package schema_test

import (
	"testing"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

// benchObjects are the corpus objects the benchmarks validate and default.
var benchObjects = []struct{ name, file string }{
	{"SandboxPool", "pool-override.yaml"},
	{"SandboxPoolWithStatus", "pool-full-status.yaml"},
	{"SandboxPoolClass", "class-default.yaml"},
}

// BenchmarkDefault measures validate + default of one object with the compiled schema:
// what the controller pays for a class's snapshot, the agent for a pass over its pool and
// sandboxpool vet for an object. CUE has regressed badly between releases; this guards the
// pinned version.
func BenchmarkDefault(b *testing.B) {
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

// BenchmarkDefaultParallel is BenchmarkDefault for a pool from GOMAXPROCS goroutines at
// once; compare its ns/op with the serial figure to see how the evaluator pool scales.
func BenchmarkDefaultParallel(b *testing.B) {
	s, err := schema.Compiled()
	if err != nil {
		b.Fatal(err)
	}
	obj, err := corpus.Find(benchObjects[0].file)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Default(schema.Kind(obj.Kind), obj.JSON); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
