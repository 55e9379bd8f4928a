package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// mebibyte is the unit status.capacity rounds memory to.
const mebibyte = 1 << 20

// MebibytesUp is n bytes rounded up to a whole mebibyte, as a quantity ("13Mi"): memory in
// use, which status.capacity shows rounded so that it reads as the other quantities do.
func MebibytesUp(n int64) resource.Quantity {
	mib := n / mebibyte
	if n%mebibyte > 0 {
		mib++
	}
	return *resource.NewQuantity(mib*mebibyte, resource.BinarySI)
}

// MebibytesDown is n bytes rounded down to a whole mebibyte, as a quantity: free memory,
// which rounding never overstates.
func MebibytesDown(n int64) resource.Quantity {
	return *resource.NewQuantity(n/mebibyte*mebibyte, resource.BinarySI)
}
