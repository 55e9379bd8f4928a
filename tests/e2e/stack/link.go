package stack

import (
	"errors"
	"io"
	"net"
	"sync"
)

// link is the node's network path to the API server: a TCP forwarder the node's kubeconfig
// (kubelet and agent) points at. Cutting it makes the API server unreachable from the node
// — connections refused, open ones reset — while the rest of the control plane keeps
// running and keeps its state; restoring it listens on the same address again. TLS passes
// through untouched (the API server's certificate is valid for 127.0.0.1).
type link struct {
	addr   string // where the node connects
	target string // the API server

	mu    sync.Mutex // guards ln and conns
	ln    net.Listener
	conns map[net.Conn]struct{}
}

func newLink(target string) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	l.serve(ln)
	return l, nil
}

func (l *link) serve(ln net.Listener) {
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.forward(c)
		}
	}()
}

func (l *link) forward(c net.Conn) {
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !l.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

// track registers both ends of a forwarded connection, unless the link was cut meanwhile.
func (l *link) track(c, up net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	l.conns[c], l.conns[up] = struct{}{}, struct{}{}
	return true
}

// Cut stops listening and closes every forwarded connection.
func (l *link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		_ = l.ln.Close()
		l.ln = nil
	}
	for c := range l.conns {
		_ = c.Close()
	}
	clear(l.conns)
}

// Restore listens on the link's address again.
func (l *link) Restore() error {
	l.mu.Lock()
	up := l.ln != nil
	l.mu.Unlock()
	if up {
		return errors.New("the link is not cut")
	}
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return err
	}
	l.serve(ln)
	return nil
}
