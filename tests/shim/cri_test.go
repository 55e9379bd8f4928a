package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/agentcube/sandboxpool/agent/shimapi/shimapitest"
	"github.com/agentcube/sandboxpool/hack/pause/image"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// handlerPlaceholder is the CRI runtime handler of deploy/containerd and the RuntimeClass.
const handlerPlaceholder = "placeholder"

// placeholderPod is the sandbox config kubelet sends for a placeholder pod of pool on the
// host network, logging below logDir.
func placeholderPod(pool, uid, logDir string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: "sandbox-pool-" + pool + "-node-a", Namespace: "kube-system", Uid: uid,
		},
		Labels:       map[string]string{poolAnnotation: pool},
		Annotations:  map[string]string{poolAnnotation: pool, "sandbox-pool.io/pool-uid": "uid-of-" + pool},
		LogDirectory: logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
}

func placeholderContainer() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "placeholder"},
		Image:    &runtimeapi.ImageSpec{Image: image.Name},
		LogPath:  "placeholder/0.log",
	}
}

// The whole CRI lifecycle of a placeholder pod, as kubelet drives it: run the sandbox with
// handler "placeholder", create and start its container, see both running, stop and
// remove the container, stop and remove the sandbox. One shim serves the pod, the agent
// sees every container with the pod's identity, and containerd logs no problem.
func TestCRILifecycle(t *testing.T) {
	e := setUp(t)
	rt, _ := e.ctd.CRI(t)
	ctx := t.Context()
	mark := e.ctd.Mark()
	logDir := filepath.Join(e.ctd.Dir, "pods", "uid-1")

	pod := placeholderPod("placeholder-node-a", "uid-1", logDir)
	runp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod, RuntimeHandler: handlerPlaceholder})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	podID := runp.PodSandboxId
	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID, Config: placeholderContainer(), SandboxConfig: pod,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	cid := created.ContainerId
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cid}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}

	ps, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || ps.Status.RuntimeHandler != handlerPlaceholder {
		t.Fatalf("PodSandboxStatus = %v, %v; want READY with handler placeholder", ps.GetStatus(), err)
	}
	cs, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cid})
	if err != nil || cs.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("ContainerStatus = %v, %v; want RUNNING", cs.GetStatus(), err)
	}
	// kubelet asks for container stats all the time; CRI gets them from the shim (Stats).
	// (Pod sandbox stats come from the pod's cgroup, which kubelet creates, not the shim.)
	if st, err := rt.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: cid}); err != nil || st.GetStats().GetAttributes().GetId() != cid {
		t.Errorf("ContainerStats = %v, %v", st, err)
	}
	if shims := e.ctd.ShimPIDs(); len(shims) != 1 {
		t.Errorf("the pod has %d shim processes (%v), want one for its sandbox and container", len(shims), shims)
	}

	// What the agent learnt: the sandbox, then its container, both with the pod's identity.
	e.waitAgent(t, shimapitest.MethodStart, cid)
	sb, app := e.agent.CallsFor(podID), e.agent.CallsFor(cid)
	if shimapitest.Methods(sb) != "Create Start" || shimapitest.Methods(app) != "Create Start" {
		t.Fatalf("agent saw %q for the sandbox and %q for the container", shimapitest.Methods(sb), shimapitest.Methods(app))
	}
	for _, c := range []struct {
		call    shimapitest.Call
		sandbox bool
		name    string
	}{{sb[0], true, ""}, {app[0], false, "placeholder"}} {
		id := c.call.Identity
		if id.GetNamespace() != containerdtest.CRINamespace || id.GetSandboxId() != podID || id.GetSandbox() != c.sandbox ||
			id.GetContainerName() != c.name || id.GetPodName() != pod.Metadata.Name || id.GetPodNamespace() != "kube-system" ||
			id.GetPodUid() != "uid-1" || id.GetPoolName() != "placeholder-node-a" || id.GetPoolUid() != "uid-of-placeholder-node-a" {
			t.Errorf("identity of %s: %v", id.GetContainerId(), id)
		}
	}

	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 10}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	cs, err = rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cid})
	if err != nil || cs.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || cs.Status.ExitCode != 0 {
		t.Fatalf("after StopContainer: %v, %v; want EXITED with code 0", cs.GetStatus(), err)
	}
	// CRI copied the container's (empty) output to its log: the stdio fifos were opened
	// and closed.
	if b, err := os.ReadFile(filepath.Join(logDir, "placeholder", "0.log")); err != nil || len(b) != 0 {
		t.Errorf("container log: %q, %v; want an empty file", b, err)
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("ListPodSandbox after removal: %v, %v", pods, err)
	}

	e.waitAgent(t, shimapitest.MethodShutdown, podID)
	if got := shimapitest.Methods(e.agent.CallsFor(podID)); got != "Create Start Delete Shutdown" {
		t.Errorf("agent saw %q for the sandbox", got)
	}
	if got := shimapitest.Methods(e.agent.CallsFor(cid)); got != "Create Start Delete" {
		t.Errorf("agent saw %q for the container", got)
	}
	e.noShimsLeft(t)
	if p := e.ctd.ProblemsSince(mark); len(p) > 0 {
		t.Errorf("containerd logged during the lifecycle:\n%s", strings.Join(p, "\n"))
	}
}

// criPod runs one placeholder pod (sandbox + started container) and returns the sandbox ID
// and how long each of the three calls took.
func criPod(ctx context.Context, rt runtimeapi.RuntimeServiceClient, handler string, n int, logDir string) (string, [3]time.Duration, error) {
	var took [3]time.Duration
	pod := placeholderPod(fmt.Sprintf("placeholder-node-%d", n), fmt.Sprintf("uid-%d", n), filepath.Join(logDir, fmt.Sprint(n)))
	start := time.Now()
	runp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod, RuntimeHandler: handler})
	if err != nil {
		return "", took, fmt.Errorf("RunPodSandbox: %w", err)
	}
	took[0] = time.Since(start)
	start = time.Now()
	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: runp.PodSandboxId, Config: placeholderContainer(), SandboxConfig: pod,
	})
	if err != nil {
		return runp.PodSandboxId, took, fmt.Errorf("CreateContainer: %w", err)
	}
	took[1] = time.Since(start)
	start = time.Now()
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		return runp.PodSandboxId, took, fmt.Errorf("StartContainer: %w", err)
	}
	took[2] = time.Since(start)
	return runp.PodSandboxId, took, nil
}

// removePods stops and removes every pod sandbox (CRI stops their containers).
func removePods(t testing.TB, rt runtimeapi.RuntimeServiceClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Errorf("ListPodSandbox: %v", err)
		return
	}
	for _, p := range pods.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("StopPodSandbox %s: %v", p.Id, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", p.Id, err)
		}
	}
}
