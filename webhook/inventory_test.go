package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
	"github.com/agentcube/sandboxpool/webhook"
)

// gpuPoolJSON is node-a's pool of class gpu; its CREATE conflicts with a default pool there.
var gpuPoolJSON = strings.ReplaceAll(poolJSON, `"default"`, `"gpu"`)

// TestInventoryInformer runs the inventory behind a real shared informer on a fake
// list/watch: the initial list, watch events and readiness.
func TestInventoryInformer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	fw := watch.NewFake()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &v1alpha1.SandboxPoolList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []v1alpha1.SandboxPool{*wrappers.MakePool("node-a").Class("default").ResourceVersion("1").Obj()}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
	}
	informer := toolscache.NewSharedIndexInformerWithOptions(listWatchOnly{lw}, &v1alpha1.SandboxPool{}, toolscache.SharedIndexInformerOptions{})

	engine := policytest.NewEngine(t)
	v := webhook.NewValidator(engine)
	inv := webhook.NewInventory(engine, logr.Discard())
	if inv.HasSynced() {
		t.Fatal("HasSynced before Register")
	}
	if err := inv.Register(informer); err != nil {
		t.Fatal(err)
	}
	if err := inv.Register(informer); err == nil {
		t.Error("second Register returned no error")
	}
	if inv.HasSynced() {
		t.Fatal("HasSynced before the informer ran")
	}
	go informer.RunWithContext(ctx)

	allowed := func(want bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			d, err := v.Validate(ctx, createPool(gpuPoolJSON))
			return err == nil && d.Allowed == want, err
		}
	}
	poll := func(what string, cond func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, cond); err != nil {
			t.Fatalf("waiting until %s: %v", what, err)
		}
	}
	poll("synced", func(context.Context) (bool, error) { return inv.HasSynced(), nil })

	d, err := v.Validate(ctx, createPool(gpuPoolJSON))
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !strings.Contains(d.Message(), "node-a") || !strings.Contains(d.Message(), "default") {
		t.Fatalf("CREATE of a gpu pool on node-a = %+v, want a denial naming the node and the class default", d)
	}

	fw.Delete(wrappers.MakePool("node-a").Class("default").ResourceVersion("1").Obj())
	poll("the deleted pool leaves the inventory", allowed(true))

	fw.Add(wrappers.MakePool("node-a").Class("default").ResourceVersion("1").Obj())
	poll("the added pool is in the inventory", allowed(false))

	fw.Modify(wrappers.MakePool("node-a").Class("gpu").ResourceVersion("1").Obj())
	poll("the updated pool is in the inventory", allowed(true))
}

// listWatchOnly tells the reflector that the fake does not stream the initial list
// (WatchList); it lists, then watches.
type listWatchOnly struct{ *toolscache.ListWatch }

func (listWatchOnly) IsWatchListSemanticsUnSupported() bool { return true }

func TestInventoryTombstone(t *testing.T) {
	engine := policytest.NewEngine(t)
	v := webhook.NewValidator(engine)
	inv := webhook.NewInventory(engine, logr.Discard())

	p := wrappers.MakePool("node-a").Class("default").ResourceVersion("1").Obj()
	inv.OnAdd(p, true)
	if d, err := v.Validate(context.Background(), createPool(gpuPoolJSON)); err != nil || d.Allowed {
		t.Fatalf("after add: %+v, %v; want a denial", d, err)
	}
	inv.OnDelete(toolscache.DeletedFinalStateUnknown{Key: p.Name, Obj: p})
	if d, err := v.Validate(context.Background(), createPool(gpuPoolJSON)); err != nil || !d.Allowed {
		t.Fatalf("after a tombstone: %+v, %v; want an allow", d, err)
	}
	// Objects of other types are ignored, not a panic.
	inv.OnAdd(&v1alpha1.SandboxPoolClass{}, false)
	inv.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "x", Obj: "junk"})
	inv.OnDelete(nil)
}
