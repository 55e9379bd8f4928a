package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/webhook"
)

func runtimeClass(name, handler string) *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}, Handler: handler}
}

// classNaming is classJSON whose placeholder pods run on RuntimeClass rc.
func classNaming(rc string) string {
	return strings.Replace(classJSON, `"resourcePolicy"`, `"placeholderPod":{"runtimeClassName":"`+rc+`"},"resourcePolicy"`, 1)
}

// TestRuntimeClassInventory runs the RuntimeClass inventory behind a real shared informer
// on a fake list/watch: until the first list is in, every class naming a RuntimeClass is
// refused (never admitted unchecked); then a class is admitted only with a RuntimeClass that
// exists and runs the placeholder handler, as the watch adds and removes them.
func TestRuntimeClassInventory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := make(chan struct{})
	fw := watch.NewFake()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &nodev1.RuntimeClassList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items: []nodev1.RuntimeClass{*runtimeClass("placeholder", "placeholder"), *runtimeClass("runc", "runc")}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
	}
	informer := toolscache.NewSharedIndexInformerWithOptions(listWatchOnly{lw}, &nodev1.RuntimeClass{}, toolscache.SharedIndexInformerOptions{})
	engine := policytest.NewEngine(t, policy.WithRuntimeClasses())
	v := webhook.NewValidator(engine)
	rcs := webhook.NewRuntimeClasses(engine, logr.Discard())
	if err := rcs.Register(informer); err != nil {
		t.Fatal(err)
	}
	go informer.RunWithContext(ctx)
	synced := make(chan error, 1)
	go func() { synced <- rcs.Run(ctx) }()

	decide := func(rc string) string {
		t.Helper()
		d, err := v.Validate(ctx, createClass(classNaming(rc)))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			return "allowed"
		}
		return d.Message()
	}
	if got := decide("placeholder"); !strings.Contains(got, `spec.placeholderPod.runtimeClassName: cannot check RuntimeClass "placeholder" yet`) {
		t.Fatalf("before the first list: %s; want a refusal that says the RuntimeClasses are not read yet", got)
	}
	if rcs.HasSynced() {
		t.Fatal("HasSynced before the first list")
	}
	close(release)
	if err := <-synced; err != nil || !rcs.HasSynced() {
		t.Fatalf("Run: %v, synced %v", err, rcs.HasSynced())
	}
	for rc, want := range map[string]string{
		"placeholder":   "allowed",
		"runc":          `spec.placeholderPod.runtimeClassName: RuntimeClass "runc" runs handler "runc", not the placeholder runtime's "placeholder"`,
		"probe-missing": `spec.placeholderPod.runtimeClassName: RuntimeClass "probe-missing" does not exist`,
	} {
		if got := decide(rc); !strings.HasPrefix(got, want) {
			t.Errorf("class naming %s: %s; want %s", rc, got, want)
		}
	}
	poll := func(what, rc, want string) {
		t.Helper()
		var got string
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = decide(rc)
			return strings.HasPrefix(got, want), nil
		}); err != nil {
			t.Fatalf("%s: class naming %s: %s; want %s", what, rc, got, want)
		}
	}
	fw.Add(runtimeClass("fast", "placeholder"))
	poll("a RuntimeClass added", "fast", "allowed")
	fw.Delete(runtimeClass("fast", "placeholder"))
	poll("a RuntimeClass deleted", "fast", `spec.placeholderPod.runtimeClassName: RuntimeClass "fast" does not exist`)
	rcs.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "placeholder", Obj: runtimeClass("placeholder", "placeholder")})
	if got := decide("placeholder"); !strings.Contains(got, "does not exist") {
		t.Errorf("after a tombstone: %s; want a refusal", got)
	}
	// Objects of other types are ignored, not a panic.
	rcs.OnAdd("junk", false)
	rcs.OnDelete(nil)
}
