package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/containerd/fifo"
)

// stdio holds the task's ends of the stdio fifos containerd created. The task writes and
// reads nothing; holding the ends open while it runs and closing them when it exits is what
// tells containerd's copiers (and CRI's log writer) that output began and ended, as with a
// real process that printed nothing.
type stdio struct {
	stdin   io.Closer   // nil without a stdin fifo, or once closed by CloseIO
	outputs []io.Closer // stdout and stderr
}

// openStdio opens the task's end of each fifo. The opens do not block: the fifo package
// completes them in the background once containerd holds the other end, bound to ctx,
// which must outlive the request (the shim's context). Paths that are not fifos (URIs
// such as binary:// or file:// logging) are left alone: there is no output to hand over.
func openStdio(ctx context.Context, stdin, stdout, stderr string) (*stdio, error) {
	s := &stdio{}
	var err error
	if s.stdin, err = openFifo(ctx, stdin, syscall.O_RDONLY); err != nil {
		return nil, err
	}
	for _, path := range []string{stdout, stderr} {
		c, err := openFifo(ctx, path, syscall.O_WRONLY)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		if c != nil {
			s.outputs = append(s.outputs, c)
		}
	}
	return s, nil
}

func openFifo(ctx context.Context, path string, flag int) (io.Closer, error) {
	if path == "" || strings.Contains(path, "://") {
		return nil, nil
	}
	c, err := fifo.OpenFifo(ctx, path, flag|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("opening stdio fifo %s: %w", path, err)
	}
	return c, nil
}

// CloseStdin closes the stdin end (CloseIO): containerd's writer sees the reader gone.
func (s *stdio) CloseStdin() error {
	if s.stdin == nil {
		return nil
	}
	err := s.stdin.Close()
	s.stdin = nil
	return err
}

// Close closes every end; containerd's readers see EOF.
func (s *stdio) Close() error {
	if s == nil {
		return nil
	}
	errs := []error{s.CloseStdin()}
	for _, c := range s.outputs {
		errs = append(errs, c.Close())
	}
	s.outputs = nil
	return errors.Join(errs...)
}
