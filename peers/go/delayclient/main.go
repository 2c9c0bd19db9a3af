// Command delayclient is the Go peer of the delay-client benchmark.
//
// The backend answers each request after D ms. This client starts N GETs at
// once, one goroutine and one new TCP connection per request (keep-alive off),
// reads every body in full and times the whole batch: from just before the
// first request starts to the moment the last one finishes.
//
//	go build -o delayclient main.go   # GO111MODULE=off, like fiberbench
//	delayclient http://127.0.0.1:8080/ 1000
//
// It prints one JSON line: {"requests": N, "ok": n, "errors": n, "seconds": s}.
// A request that fails, or answers with a status other than 200, is counted in
// errors and the run goes on; the first such error is printed to stderr.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: delayclient URL [N]")
		os.Exit(2)
	}
	url, n := os.Args[1], 1000
	if len(os.Args) == 3 {
		var err error
		if n, err = strconv.Atoi(os.Args[2]); err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "N must be a positive integer:", os.Args[2])
			os.Exit(2)
		}
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}}
	var ok, errs atomic.Int64
	var firstErr sync.Once
	fail := func(err error) {
		errs.Add(1)
		firstErr.Do(func() { fmt.Fprintln(os.Stderr, "first error:", err) })
	}
	get := func() {
		resp, err := client.Get(url)
		if err != nil {
			fail(err)
			return
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			fail(err)
		} else if resp.StatusCode != http.StatusOK {
			fail(fmt.Errorf("status %s", resp.Status))
		} else {
			ok.Add(1)
		}
	}

	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get()
		}()
	}
	wg.Wait()
	seconds := time.Since(start).Seconds()

	line, _ := json.Marshal(struct {
		Requests int     `json:"requests"`
		Ok       int64   `json:"ok"`
		Errors   int64   `json:"errors"`
		Seconds  float64 `json:"seconds"`
	}{n, ok.Load(), errs.Load(), seconds})
	fmt.Println(string(line))
}
