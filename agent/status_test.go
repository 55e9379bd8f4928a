package agent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func TestOverrideStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	enabled := &v1alpha1.Override{Enabled: true, Reason: "OPS-1"}
	disabled := &v1alpha1.Override{Enabled: false, Reason: "OPS-1"}
	for _, tc := range []struct {
		name   string
		spec   *v1alpha1.Override
		prev   *v1alpha1.OverrideStatus
		source v1alpha1.OverrideSource
		at     *metav1.Time
	}{
		{"no override", nil, nil, "", nil},
		{"enabled now", enabled, nil, v1alpha1.OverrideSourceOverride, &now},
		{"enabled since earlier", enabled, &v1alpha1.OverrideStatus{Enabled: ptr.To(true), OverriddenAt: &earlier}, v1alpha1.OverrideSourceOverride, &earlier},
		{"enabled again after disabled", enabled, &v1alpha1.OverrideStatus{Enabled: ptr.To(false), OverriddenAt: &earlier}, v1alpha1.OverrideSourceOverride, &now},
		{"disabled", disabled, &v1alpha1.OverrideStatus{Enabled: ptr.To(true), OverriddenAt: &earlier}, v1alpha1.OverrideSourceClass, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := overrideStatus(tc.spec, tc.prev, now)
			if tc.spec == nil {
				if got != nil {
					t.Fatalf("status.override = %+v, want none", got)
				}
				return
			}
			if got.Source != tc.source || *got.Enabled != tc.spec.Enabled || got.Reason != tc.spec.Reason {
				t.Errorf("status.override = source %q enabled %v reason %q, want %q %v %q", got.Source, *got.Enabled, got.Reason, tc.source, tc.spec.Enabled, tc.spec.Reason)
			}
			if (got.OverriddenAt == nil) != (tc.at == nil) || (tc.at != nil && !got.OverriddenAt.Equal(tc.at)) {
				t.Errorf("overriddenAt = %v, want %v", got.OverriddenAt, tc.at)
			}
		})
	}
}
