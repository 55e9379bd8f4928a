package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/agentcube/sandboxpool/agent/lock"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func rl(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

func TestResizeState(t *testing.T) {
	want := rl("2", "4Gi")
	inProgress := resizeState(nil, false, lock.Step{}, want)
	if inProgress == nil || inProgress.Status != v1alpha1.ResizeInProgress || inProgress.RequestedMemory.String() != "4Gi" {
		t.Fatalf("unsynced plan: %+v, want InProgress with the requested size", inProgress)
	}
	done := resizeState(inProgress, false, lock.Step{Synced: true}, want)
	if done == nil || done.Status != v1alpha1.ResizeCompleted {
		t.Fatalf("synced after InProgress: %+v, want Completed", done)
	}
	if again := resizeState(done, false, lock.Step{Synced: true}, want); again != done {
		t.Errorf("synced after Completed changed the status: %+v", again)
	}
	if first := resizeState(nil, true, lock.Step{}, want); first != nil {
		t.Errorf("the first apply is not a resize, got %+v", first)
	}
	if d := resizeState(nil, false, lock.Step{Deferred: lock.DeferRoom, Reason: "r"}, want); d.Status != v1alpha1.ResizeDeferred || d.DeferredReason != "r" {
		t.Errorf("deferred: %+v", d)
	}
}

func TestReadableBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 1000: "1000", 1024: "1Ki", 512 << 20: "512Mi", 7378697629: "6.87Gi",
		85 * (2 << 30) / 100: "1.7Gi", 3 << 40: "3Ti",
	} {
		if got := lock.ReadableBytes(n); got != want {
			t.Errorf("readableBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
