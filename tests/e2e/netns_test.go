package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"
)

// TestNetnsPodGetsAnIP (alpha --netns-enabled): the placeholder pod gets a network
// namespace of its own; containerd's CRI sets it up with the node's CNI bridge (Debian's
// containernetworking-plugins), the placeholder shim runs nothing in it, and the pod's IP
// from the bridge's subnet shows in status.placeholderPod.ip. Then back to the host network.
func TestNetnsPodGetsAnIP(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if err := s.RestartAgent(ctx); err != nil {
			t.Error(err)
		}
		eventually(t, "back on the host network", 2*time.Minute, func() (bool, string) {
			p := mirrorPod(t)
			return p != nil && p.Spec.HostNetwork && podReady(p), podState(p)
		})
		ensureClass(t)
	})
	_, subnet, err := net.ParseCIDR(s.Network.Subnet)
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	if err := s.RestartAgent(ctx, "--netns-enabled"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod's IP in status.placeholderPod.ip", 2*time.Minute, func() (bool, string) {
		pod, p := mirrorPod(t), getPool(t)
		if pod == nil || p == nil || p.Status.PlaceholderPod == nil {
			return false, describe(p)
		}
		ip := net.ParseIP(p.Status.PlaceholderPod.IP)
		return !pod.Spec.HostNetwork && podReady(pod) && ip != nil && subnet.Contains(ip) && pod.Status.PodIP == ip.String(),
			fmt.Sprintf("pod hostNetwork %v, podIP %q, %s; status ip %q (bridge subnet %s)",
				pod.Spec.HostNetwork, pod.Status.PodIP, podState(pod), p.Status.PlaceholderPod.IP, subnet)
	})
	p := getPool(t)
	t.Logf("--netns-enabled: the placeholder pod has %s from the CNI bridge %s (%s) in %s",
		p.Status.PlaceholderPod.IP, s.Network.Bridge, s.Network.Subnet, time.Since(t0).Round(time.Millisecond))
	waitSynced(t, baseCPU, baseMemory, time.Minute)
}
