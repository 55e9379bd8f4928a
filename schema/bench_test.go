package schema_test

import (
	"testing"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

// BenchmarkDefault measures validate + default of one object with the compiled schema.
// CUE has regressed badly between releases; this guards the pinned version.
func BenchmarkDefault(b *testing.B) {
	s, err := schema.Compiled()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, file string }{
		{"SandboxPool", "pool-override.yaml"},
		{"SandboxPoolWithStatus", "pool-full-status.yaml"},
		{"SandboxPoolClass", "class-default.yaml"},
	} {
		obj, err := corpus.Find(tc.file)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
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
// once, as the webhook calls it; compare its ns/op with the serial figure to see how the
// evaluator pool scales.
func BenchmarkDefaultParallel(b *testing.B) {
	s, err := schema.Compiled()
	if err != nil {
		b.Fatal(err)
	}
	pool, err := corpus.Find("pool-override.yaml")
	if err != nil {
		b.Fatal(err)
	}
	obj := pool.JSON
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Default(schema.KindSandboxPool, obj); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
