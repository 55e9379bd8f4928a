// Package failpoint injects faults into the placeholder shim's task service for tests, in
// the style of containerd's failpoint shim (integration/failpoint): a failpoint per TTRPC
// method, configured by an OCI annotation of the task,
//
//	io.containerd.runtime.v2.shim.failpoint.<Method> = <count>*<type>[(arg)][-><more terms>]
//
// where type is off, error(message) or delay(milliseconds). "1*off->1*error(boom)" lets
// the first call through and fails the second. The terms follow containerd's
// internal/failpoint (FreeBSD's fail(9)), which is not importable.
package failpoint

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
)

// AnnotationPrefix is followed by the Task API method name (Create, Start, Kill, ...).
const AnnotationPrefix = "io.containerd.runtime.v2.shim.failpoint."

// term is one <count>*<type>[(arg)].
type term struct {
	count int
	kind  string // off, error, delay
	msg   string
	delay time.Duration
}

// Failpoint is the parsed control of one method.
type Failpoint struct {
	mu    sync.Mutex // guards terms' counts
	terms []*term
}

// Parse parses a control such as "1*off->2*error(injected)->1*delay(500)".
func Parse(control string) (*Failpoint, error) {
	fp := &Failpoint{}
	for t := range strings.SplitSeq(control, "->") {
		countText, rest, ok := strings.Cut(t, "*")
		if !ok {
			return nil, fmt.Errorf("failpoint term %q: want <count>*<type>", t)
		}
		count, err := strconv.Atoi(countText)
		if err != nil || count < 0 {
			return nil, fmt.Errorf("failpoint term %q: count %q is not a non-negative number", t, countText)
		}
		tm := &term{count: count}
		kind, arg, hasArg := strings.Cut(rest, "(")
		if hasArg {
			if !strings.HasSuffix(arg, ")") {
				return nil, fmt.Errorf("failpoint term %q: unclosed argument", t)
			}
			arg = strings.TrimSuffix(arg, ")")
		}
		switch tm.kind = kind; {
		case kind == "off" && !hasArg:
		case kind == "error" && hasArg && arg != "":
			tm.msg = arg
		case kind == "delay" && hasArg:
			ms, err := strconv.Atoi(arg)
			if err != nil || ms < 0 {
				return nil, fmt.Errorf("failpoint term %q: delay wants milliseconds", t)
			}
			tm.delay = time.Duration(ms) * time.Millisecond
		default:
			return nil, fmt.Errorf("failpoint term %q: want off, error(message) or delay(ms)", t)
		}
		fp.terms = append(fp.terms, tm)
	}
	return fp, nil
}

// Evaluate consumes one count of the first term that has any left and acts on it: nil
// for off (or when every term is used up), an Unknown error with the message for error,
// nil after sleeping for delay.
func (fp *Failpoint) Evaluate(ctx context.Context) error {
	fp.mu.Lock()
	var t *term
	for _, c := range fp.terms {
		if c.count > 0 {
			c.count--
			t = c
			break
		}
	}
	fp.mu.Unlock()
	switch {
	case t == nil || t.kind == "off":
		return nil
	case t.kind == "error":
		return errgrpc.ToGRPC(errdefs.ErrUnknown.WithMessage(t.msg))
	default:
		timer := time.NewTimer(t.delay)
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// FromAnnotations returns the failpoints configured in annotations, by method name.
func FromAnnotations(annotations map[string]string) (map[string]*Failpoint, error) {
	fps := map[string]*Failpoint{}
	for k, v := range annotations {
		method, ok := strings.CutPrefix(k, AnnotationPrefix)
		if !ok {
			continue
		}
		fp, err := Parse(v)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", k, err)
		}
		fps[method] = fp
	}
	return fps, nil
}

// Interceptor evaluates the failpoint of each call's method before the call.
func Interceptor(fps map[string]*Failpoint) ttrpc.UnaryServerInterceptor {
	return func(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (any, error) {
		if fp, ok := fps[path.Base(info.FullMethod)]; ok {
			if err := fp.Evaluate(ctx); err != nil {
				return nil, err
			}
		}
		return method(ctx, unmarshal)
	}
}
