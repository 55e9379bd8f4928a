package containerdtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Event is one containerd event as `ctr events` prints it.
type Event struct {
	Namespace string
	Topic     string // /tasks/create, /tasks/start, /tasks/exit, /tasks/delete, ...
	// Fields of the task events (absent ones are zero, as protobuf omits them).
	ContainerID string `json:"container_id"`
	ExitStatus  uint32 `json:"exit_status"`
	Pid         uint32 `json:"pid"`
}

// Events is a subscription to containerd's events through `ctr events`.
type Events struct {
	mu      sync.Mutex // guards events and changed
	events  []Event
	changed chan struct{}
}

// Subscribe starts `ctr events` and returns once it is subscribed: it creates a namespace
// and waits for that event, so no later event can be missed. t's cleanup stops it.
func (c *Containerd) Subscribe(t testing.TB) *Events {
	t.Helper()
	cmd := exec.Command(c.Tool("ctr"), "-a", c.Address, "events")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	e := &Events{changed: make(chan struct{})}
	go e.read(bufio.NewScanner(stdout))

	probe := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		if out, err := c.Ctr(ctx, "namespaces", "create", probe); err != nil {
			t.Fatalf("creating the probe namespace: %v: %s", err, out)
		}
		// The first creations may precede the subscription: try again until one shows.
		waitCtx, waitCancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := e.Wait(waitCtx, func(ev Event) bool { return ev.Topic == "/namespaces/create" })
		waitCancel()
		_, _ = c.Ctr(ctx, "namespaces", "remove", probe)
		if err == nil {
			return e
		}
		if ctx.Err() != nil {
			t.Fatal("ctr events did not subscribe within 30s")
		}
	}
}

// read parses lines such as
// "2026-11-30 01:11:31.07 +0000 UTC shimtest /tasks/exit {"container_id":"t2",...}".
func (e *Events) read(s *bufio.Scanner) {
	for s.Scan() {
		f := strings.SplitN(s.Text(), " ", 7)
		if len(f) < 6 {
			continue
		}
		ev := Event{}
		if len(f) == 7 {
			_ = json.Unmarshal([]byte(f[6]), &ev)
		}
		ev.Namespace, ev.Topic = f[4], f[5]
		e.mu.Lock()
		e.events = append(e.events, ev)
		close(e.changed)
		e.changed = make(chan struct{})
		e.mu.Unlock()
	}
}

// All returns the events received so far.
func (e *Events) All() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.events...)
}

// Wait returns the first event received (so far or later) that match accepts.
func (e *Events) Wait(ctx context.Context, match func(Event) bool) (Event, error) {
	for i := 0; ; {
		e.mu.Lock()
		events, changed := e.events, e.changed
		e.mu.Unlock()
		for ; i < len(events); i++ {
			if match(events[i]) {
				return events[i], nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Task returns a matcher for a task event of one container.
func Task(topic, containerID string) func(Event) bool {
	return func(ev Event) bool { return ev.Topic == topic && ev.ContainerID == containerID }
}

// Topics lists the task event topics of one container, in order.
func (e *Events) Topics(containerID string) []string {
	var out []string
	for _, ev := range e.All() {
		if ev.ContainerID == containerID && strings.HasPrefix(ev.Topic, "/tasks/") {
			out = append(out, ev.Topic)
		}
	}
	return out
}
