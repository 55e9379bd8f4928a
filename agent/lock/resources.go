package lock

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	quota "k8s.io/apiserver/pkg/quota/v1"
)

// readableBytes prints n for a reason a person reads: "6.87Gi", "512Mi", "900Ki". Usage is
// rarely a round number, and a quantity would print it as raw bytes.
func ReadableBytes(n int64) string {
	for _, u := range []struct {
		size int64
		unit string
	}{{1 << 40, "Ti"}, {1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}} {
		if n >= u.size {
			v := strconv.FormatFloat(float64(n)/float64(u.size), 'f', 2, 64)
			return strings.TrimSuffix(strings.TrimRight(v, "0"), ".") + u.unit
		}
	}
	return strconv.FormatInt(n, 10)
}

// equalResources compares two lists by value (1000m equals 1).
func Equal(a, b corev1.ResourceList) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for name, q := range a {
		o, ok := b[name]
		if !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

// quantityText prints a quantity a person reads: memory-like resources in binary units.
func QuantityText(name corev1.ResourceName, q resource.Quantity) string {
	if name == corev1.ResourceCPU {
		return q.String()
	}
	if name == corev1.ResourceMemory || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
		return ReadableBytes(q.Value())
	}
	return q.String()
}

// resourceNames is the sorted union of the lists' names.
func Names(lists ...corev1.ResourceList) []corev1.ResourceName {
	set := map[corev1.ResourceName]bool{}
	for _, l := range lists {
		for n := range l {
			set[n] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// The arithmetic of resource lists is the API server's quota package's (k8s.io/apiserver's
// quota/v1): these name what the lock plan asks of it.

// addTo adds b to a, name by name.
func AddTo(a, b corev1.ResourceList) { maps.Copy(a, quota.Add(a, b)) }

// subtract is a − b, name by name, over both lists' names (negative where b is larger).
func Subtract(a, b corev1.ResourceList) corev1.ResourceList { return quota.Subtract(a, b) }

// positivePart keeps the names whose quantity is above zero.
func PositivePart(l corev1.ResourceList) corev1.ResourceList {
	return quota.RemoveZeros(quota.SubtractWithNonNegativeResult(l, nil))
}

// maxOf is the larger of a and b, name by name, without the names that are zero in both.
func MaxOf(a, b corev1.ResourceList) corev1.ResourceList {
	return PositivePart(quota.Max(a, b))
}

// covers reports whether a holds at least b, name by name (a name a lacks holds zero).
func Covers(a, b corev1.ResourceList) bool { return len(quota.IsNegative(quota.Subtract(a, b))) == 0 }

func MinQuantity(a, b resource.Quantity) resource.Quantity {
	if b.Cmp(a) < 0 {
		return b
	}
	return a
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Text prints a resource list for logs and messages: "cpu 500m, memory 256Mi".
func Text(l corev1.ResourceList) string {
	var parts []string
	for _, n := range Names(l) {
		parts = append(parts, string(n)+" "+QuantityText(n, l[n]))
	}
	return strings.Join(parts, ", ")
}
