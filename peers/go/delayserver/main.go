// Command delayserver is the Go peer of `neverblock delay-server`: every request
// is answered 200 OK after a fixed delay, with net/http's keep-alive and a
// 60-second idle timeout, on GOMAXPROCS threads.
//
//	go build -o delayserver main.go   # GO111MODULE=off, like the other peers
//	delayserver -delay 0s -procs 1
//
// It listens on a free loopback port and prints its URL on the first line of
// standard output, then serves until killed.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"
)

func main() {
	delay := flag.Duration("delay", 0, "how long to wait before answering each request")
	procs := flag.Int("procs", runtime.NumCPU(), "GOMAXPROCS: threads running goroutines")
	flag.Parse()
	runtime.GOMAXPROCS(*procs)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	body := []byte("ok\n")
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if *delay > 0 {
			time.Sleep(*delay)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	server := &http.Server{Handler: handler, IdleTimeout: 60 * time.Second, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s/\n", listener.Addr())
	os.Stdout.Sync()
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
