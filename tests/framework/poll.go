package framework

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Eventually polls cond every interval until it holds or within passes, and fails t with
// what and cond's last state then. It returns how long it took.
func Eventually(t testing.TB, what string, within, interval time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	began := time.Now()
	deadline := began.Add(within)
	for {
		ok, state := cond()
		if ok {
			return time.Since(began)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last state: %s", what, within, state)
		}
		time.Sleep(interval) // poll interval, bounded by the deadline
	}
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// HTTPGet returns the status code and body of a GET of url (0 and the error text when the
// request fails).
func HTTPGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
