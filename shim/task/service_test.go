package task

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	cg1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	cg2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/fifo"
	"github.com/containerd/typeurl/v2"

	"github.com/agentcube/sandboxpool/agent/shimapi/shimapitest"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/shim/agentclient"
	"github.com/agentcube/sandboxpool/tests/support"
)

// recorder is the shim's event publisher: it keeps what the service published.
type recorder struct {
	mu      sync.Mutex // guards events and changed
	events  []any
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) Publish(_ context.Context, _ string, e events.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

func (r *recorder) Close() error { return nil }

// waitFor returns the events once there are n, failing t after a deadline.
func (r *recorder) waitFor(t *testing.T, n int) []any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got, changed := append([]any(nil), r.events...), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("published %d events (%s), want %d", len(got), kinds(got), n)
		}
	}
}

func kinds(evs []any) string {
	var k []string
	for _, e := range evs {
		k = append(k, strings.TrimPrefix(fmt.Sprintf("%T", e), "*events."))
	}
	return strings.Join(k, " ")
}

type fixture struct {
	svc   *service
	agent *shimapitest.Agent
	pub   *recorder
	sd    shutdown.Service
	dir   string
}

// newFixture runs the task service in process, against the recording agent over TTRPC.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := support.ShortTempDir(t)
	agent := shimapitest.StartTest(t)

	ctx, sd := shutdown.WithShutdown(namespaces.WithNamespace(context.Background(), "k8s.io"))
	t.Cleanup(func() { sd.Shutdown(); <-sd.Done() })
	pub := newRecorder()
	client := agentclient.New(agentclient.Config{Address: agent.Address(), Timeout: 2 * time.Second})
	svc, err := NewTaskService(ctx, pub, sd, client)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{svc: svc.(*service), agent: agent, pub: pub, sd: sd, dir: dir}
}

// bundle writes an OCI bundle with annotations and returns its path.
func (f *fixture) bundle(t *testing.T, id string, annotations map[string]string) string {
	t.Helper()
	b := filepath.Join(f.dir, id)
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "annotations": annotations})
	if err := os.WriteFile(filepath.Join(b, "config.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fixture) create(t *testing.T, id string, annotations map[string]string) {
	t.Helper()
	if _, err := f.svc.Create(t.Context(), &taskAPI.CreateTaskRequest{ID: id, Bundle: f.bundle(t, id, annotations)}); err != nil {
		t.Fatalf("Create %s: %v", id, err)
	}
}

func (f *fixture) status(t *testing.T, id string) task.Status {
	t.Helper()
	st, err := f.svc.State(t.Context(), &taskAPI.StateRequest{ID: id})
	if err != nil {
		t.Fatalf("State %s: %v", id, err)
	}
	if st.Pid != 0 {
		t.Errorf("State %s: pid %d, want 0", id, st.Pid)
	}
	return st.Status
}

// sandboxAnnotations are what CRI puts on a placeholder pod's sandbox container.
func sandboxAnnotations(id string) map[string]string {
	return map[string]string{
		annotationContainerType:    containerTypeSandbox,
		AnnotationSandboxID:        id,
		annotationSandboxName:      "sandbox-pool-placeholder-node-a-node-a",
		annotationSandboxNamespace: "kube-system",
		annotationSandboxUID:       "pod-uid",
		annotationPoolName:         "placeholder-node-a",
		annotationPoolUID:          "pool-uid",
	}
}

func TestLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.create(t, "sb", sandboxAnnotations("sb"))
	if s := f.status(t, "sb"); s != task.Status_CREATED {
		t.Fatalf("after Create: %s", s)
	}
	if _, err := f.svc.Start(ctx, &taskAPI.StartRequest{ID: "sb"}); err != nil {
		t.Fatal(err)
	}
	if s := f.status(t, "sb"); s != task.Status_RUNNING {
		t.Fatalf("after Start: %s", s)
	}
	if _, err := f.svc.Start(ctx, &taskAPI.StartRequest{ID: "sb"}); !errdefs.IsFailedPrecondition(errgrpc.ToNative(err)) {
		t.Errorf("second Start = %v, want FailedPrecondition", err)
	}
	if _, err := f.svc.Delete(ctx, &taskAPI.DeleteRequest{ID: "sb"}); !errdefs.IsFailedPrecondition(errgrpc.ToNative(err)) {
		t.Errorf("Delete of a running task = %v, want FailedPrecondition", err)
	}

	waited := make(chan *taskAPI.WaitResponse, 1)
	go func() {
		resp, err := f.svc.Wait(context.Background(), &taskAPI.WaitRequest{ID: "sb"})
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		waited <- resp
	}()
	if _, err := f.svc.Kill(ctx, &taskAPI.KillRequest{ID: "sb", Signal: 0}); err != nil {
		t.Errorf("signal 0 to a running task: %v", err)
	}
	if _, err := f.svc.Kill(ctx, &taskAPI.KillRequest{ID: "sb", Signal: uint32(syscall.SIGTERM)}); err != nil {
		t.Fatal(err)
	}
	if resp := <-waited; resp == nil || resp.ExitStatus != 0 || resp.ExitedAt == nil {
		t.Errorf("Wait after Kill = %v, want exit status 0 with a time", resp)
	}
	if s := f.status(t, "sb"); s != task.Status_STOPPED {
		t.Errorf("after Kill: %s", s)
	}
	if _, err := f.svc.Kill(ctx, &taskAPI.KillRequest{ID: "sb", Signal: uint32(syscall.SIGKILL)}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		t.Errorf("Kill of a stopped task = %v, want NotFound (process already finished)", err)
	}
	del, err := f.svc.Delete(ctx, &taskAPI.DeleteRequest{ID: "sb"})
	if err != nil || del.ExitStatus != 0 || del.Pid != 0 {
		t.Fatalf("Delete = %v, %v", del, err)
	}
	if _, err := f.svc.State(ctx, &taskAPI.StateRequest{ID: "sb"}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		t.Errorf("State after Delete = %v, want NotFound", err)
	}
	if _, err := f.svc.Shutdown(ctx, &taskAPI.ShutdownRequest{ID: "sb"}); err != nil {
		t.Fatal(err)
	}
	<-f.sd.Done()

	evs := f.pub.waitFor(t, 4)
	if got, want := kinds(evs), "TaskCreate TaskStart TaskExit TaskDelete"; got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if exit, ok := evs[2].(*eventstypes.TaskExit); !ok || exit.ContainerID != "sb" || exit.ID != "sb" || exit.ExitStatus != 0 || exit.Pid != 0 {
		t.Errorf("exit event %+v", evs[2])
	}

	calls := f.agent.CallsFor("sb")
	if got, want := shimapitest.Methods(calls), "Create Start Delete Shutdown"; got != want {
		t.Fatalf("agent saw %q, want %q", got, want)
	}
	id := calls[0].Identity
	want := &v1.Identity{
		Namespace: "k8s.io", ContainerId: "sb", SandboxId: "sb", Sandbox: true,
		PodName: "sandbox-pool-placeholder-node-a-node-a", PodNamespace: "kube-system", PodUid: "pod-uid",
		PoolName: "placeholder-node-a", PoolUid: "pool-uid",
	}
	if id.String() != want.String() {
		t.Errorf("identity %v, want %v", id, want)
	}
	if sd := calls[3].Request.(*v1.ShutdownRequest); sd.Now {
		t.Errorf("Shutdown after the last delete says now=true")
	}
}

func TestWaitReturnsOnShutdown(t *testing.T) {
	f := newFixture(t)
	f.create(t, "sb", sandboxAnnotations("sb"))
	f.create(t, "app", map[string]string{AnnotationSandboxID: "sb", annotationContainerName: "placeholder"})
	for _, id := range []string{"sb", "app"} {
		if _, err := f.svc.Start(t.Context(), &taskAPI.StartRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan uint32, 2)
	for _, id := range []string{"sb", "app"} {
		go func() {
			resp, err := f.svc.Wait(context.Background(), &taskAPI.WaitRequest{ID: id})
			if err != nil {
				t.Errorf("Wait %s: %v", id, err)
				waited <- 255
				return
			}
			waited <- resp.ExitStatus
		}()
	}
	// Without Now, a shim with tasks keeps running.
	if _, err := f.svc.Shutdown(t.Context(), &taskAPI.ShutdownRequest{ID: "app"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.sd.Done():
		t.Fatal("the shim shut down with two running tasks")
	default:
	}
	if _, err := f.svc.Shutdown(t.Context(), &taskAPI.ShutdownRequest{ID: "sb", Now: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if status := <-waited; status != 0 {
			t.Errorf("Wait returned %d on shutdown, want 0", status)
		}
	}
	<-f.sd.Done()
	// Both exits reached the publisher before the shim's shutdown completed.
	if got := kinds(f.pub.waitFor(t, 6)); strings.Count(got, "TaskExit") != 2 {
		t.Errorf("events %q, want an exit for each task", got)
	}
	var shutdowns []*v1.ShutdownRequest
	for _, c := range f.agent.Calls() {
		if c.Method == shimapitest.MethodShutdown {
			shutdowns = append(shutdowns, c.Request.(*v1.ShutdownRequest))
		}
	}
	if len(shutdowns) != 1 || !shutdowns[0].Now || shutdowns[0].Identity.GetContainerId() != "sb" {
		t.Errorf("agent saw shutdowns %v, want one, now, naming the sandbox", shutdowns)
	}
}

func TestCreateFailsWhenTheAgentRefuses(t *testing.T) {
	f := newFixture(t)
	f.agent.Fail(shimapitest.MethodCreate, 1, errdefs.ErrFailedPrecondition.WithMessage("no such pool"))
	_, err := f.svc.Create(t.Context(), &taskAPI.CreateTaskRequest{ID: "sb", Bundle: f.bundle(t, "sb", sandboxAnnotations("sb"))})
	if !errdefs.IsFailedPrecondition(errgrpc.ToNative(err)) || !strings.Contains(err.Error(), "no such pool") {
		t.Fatalf("Create = %v, want the agent's refusal", err)
	}
	if _, err := f.svc.State(t.Context(), &taskAPI.StateRequest{ID: "sb"}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		t.Errorf("a refused task exists: State = %v", err)
	}
	// containerd (kubelet) retries: the same ID is free again.
	f.create(t, "sb", sandboxAnnotations("sb"))
	if evs := f.pub.waitFor(t, 1); kinds(evs) != "TaskCreate" {
		t.Errorf("events %q, want one TaskCreate (none for the refused attempt)", kinds(evs))
	}
	_, err = f.svc.Create(t.Context(), &taskAPI.CreateTaskRequest{ID: "sb", Bundle: f.bundle(t, "sb", nil)})
	if !errdefs.IsAlreadyExists(errgrpc.ToNative(err)) {
		t.Errorf("Create of an existing task = %v, want AlreadyExists", err)
	}
}

func TestCreateFailsWhenTheAgentIsDown(t *testing.T) {
	f := newFixture(t)
	if err := f.agent.Down(); err != nil {
		t.Fatal(err)
	}
	_, err := f.svc.Create(t.Context(), &taskAPI.CreateTaskRequest{ID: "sb", Bundle: f.bundle(t, "sb", nil)})
	if !errdefs.IsUnavailable(errgrpc.ToNative(err)) || !strings.Contains(err.Error(), f.agent.Address()) {
		t.Fatalf("Create = %v, want Unavailable naming the agent's address", err)
	}
}

func TestStatsAreEmptyCgroupMetrics(t *testing.T) {
	f := newFixture(t)
	f.create(t, "sb", nil)
	resp, err := f.svc.Stats(t.Context(), &taskAPI.StatsRequest{ID: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := typeurl.UnmarshalAny(resp.Stats)
	if err != nil {
		t.Fatal(err)
	}
	// CRI reads the OOM counter from these two types on every exit and errors on others.
	switch m.(type) {
	case *cg1stats.Metrics:
		if cgroups.Mode() == cgroups.Unified {
			t.Error("cgroup v1 metrics on a unified host")
		}
	case *cg2stats.Metrics:
		if cgroups.Mode() != cgroups.Unified {
			t.Error("cgroup v2 metrics on a v1 host")
		}
	default:
		t.Errorf("metrics of type %T", m)
	}
}

// The shim opens its ends of the stdio fifos and closes them when the task exits, so
// containerd's readers (CRI's log copier) see output begin and end.
func TestStdioFifosAreOpenedAndClosed(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	paths := map[string]string{}
	readers := map[string]io.ReadCloser{}
	for _, name := range []string{"stdout", "stderr"} {
		paths[name] = filepath.Join(f.dir, name)
		// As containerd does: create the fifo and open the read end without waiting.
		r, err := fifo.OpenFifo(ctx, paths[name], syscall.O_RDONLY|syscall.O_CREAT|syscall.O_NONBLOCK, 0o700)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		readers[name] = r
	}
	if _, err := f.svc.Create(ctx, &taskAPI.CreateTaskRequest{
		ID: "app", Bundle: f.bundle(t, "app", nil), Stdout: paths["stdout"], Stderr: paths["stderr"],
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Start(ctx, &taskAPI.StartRequest{ID: "app"}); err != nil {
		t.Fatal(err)
	}
	eof := make(chan string, 2)
	for name, r := range readers {
		go func() {
			// Blocks until the shim opened the write end, then until it closed it.
			if b, err := io.ReadAll(r); err != nil || len(b) != 0 {
				t.Errorf("%s: read %q, %v", name, b, err)
			}
			eof <- name
		}()
	}
	if _, err := f.svc.Kill(ctx, &taskAPI.KillRequest{ID: "app", Signal: uint32(syscall.SIGTERM)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for range 2 {
		select {
		case <-eof:
		case <-deadline:
			t.Fatal("a stdio reader saw no end of output after the task exited")
		}
	}
}

func TestUnsupportedCallsSayWhy(t *testing.T) {
	f := newFixture(t)
	f.create(t, "app", nil)
	ctx := t.Context()
	if _, err := f.svc.Exec(ctx, &taskAPI.ExecProcessRequest{ID: "app", ExecID: "e"}); !errdefs.IsNotImplemented(errgrpc.ToNative(err)) {
		t.Errorf("Exec = %v, want NotImplemented", err)
	}
	if _, err := f.svc.Pause(ctx, &taskAPI.PauseRequest{ID: "app"}); !errdefs.IsNotImplemented(errgrpc.ToNative(err)) {
		t.Errorf("Pause = %v, want NotImplemented", err)
	}
	if _, err := f.svc.Update(ctx, &taskAPI.UpdateTaskRequest{ID: "app"}); err != nil {
		t.Errorf("Update (resources, nothing to apply) = %v", err)
	}
	if _, err := f.svc.Wait(ctx, &taskAPI.WaitRequest{ID: "app", ExecID: "e"}); !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		t.Errorf("Wait for an exec = %v, want NotFound", err)
	}
	// containerd deletes a reloaded task without processes as leaked: a live task has pid 0.
	if pids, err := f.svc.Pids(ctx, &taskAPI.PidsRequest{ID: "app"}); err != nil || len(pids.Processes) != 1 || pids.Processes[0].Pid != 0 {
		t.Errorf("Pids of a live task = %v, %v; want one process, pid 0", pids, err)
	}
	if _, err := f.svc.Kill(ctx, &taskAPI.KillRequest{ID: "app", Signal: uint32(syscall.SIGKILL)}); err != nil {
		t.Fatal(err)
	}
	if pids, err := f.svc.Pids(ctx, &taskAPI.PidsRequest{ID: "app"}); err != nil || len(pids.Processes) != 0 {
		t.Errorf("Pids of an exited task = %v, %v; want none", pids, err)
	}
}

// The shim repeats the pool annotation names instead of importing the API types; they must
// stay the schema's.
func TestPoolAnnotationsAreTheSchemas(t *testing.T) {
	if annotationPoolName != v1alpha1.AnnotationPoolName || annotationPoolUID != v1alpha1.AnnotationPoolUID {
		t.Errorf("shim reads %s and %s, the schema names %s and %s",
			annotationPoolName, annotationPoolUID, v1alpha1.AnnotationPoolName, v1alpha1.AnnotationPoolUID)
	}
}
