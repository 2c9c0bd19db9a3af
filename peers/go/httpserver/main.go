// Command httpserver is the Go net/http peer of the HTTP server benchmarks.
//
// With -dir it serves the files under that directory with http.FileServer
// (sendfile(2) for file bodies, as Go's TCPConn.ReadFrom does); without it it
// answers every request with the 13 bytes "hello, world\n" as text/plain. With
// -tls-cert and -tls-key it speaks HTTPS alone (http.ServeTLS: crypto/tls's
// defaults, TLS 1.2 and 1.3, session tickets on; HTTP/2 when the client's ALPN
// offers h2, as net/http does by default). With -h2c it speaks HTTP/2 in
// cleartext too, to clients with prior knowledge (http.Protocols, Go 1.24 or
// later), beside HTTP/1.1. It listens on -listen (port 0:
// any free port) and prints its URL (http:// or https://) as the first line on
// stdout once it listens. GOMAXPROCS (from the environment) sets how
// many threads run Go code at once: the benchmark sets it to the number of
// workers the other servers get.
//
//	go build -o httpserver main.go   # GO111MODULE=off, like fiberbench
//	GOMAXPROCS=1 httpserver -listen 127.0.0.1:0 [-dir DIR] [-tls-cert CERT -tls-key KEY] [-h2c]
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
)

var hello = []byte("hello, world\n")

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	dir := flag.String("dir", "", "serve the files under this directory (default: answer hello, world)")
	cert := flag.String("tls-cert", "", "serve HTTPS with this certificate (PEM), with -tls-key")
	key := flag.String("tls-key", "", "the private key (PEM) of -tls-cert")
	h2c := flag.Bool("h2c", false, "also speak HTTP/2 in cleartext, by prior knowledge")
	flag.Parse()
	if (*cert == "") != (*key == "") {
		fmt.Fprintln(os.Stderr, "-tls-cert and -tls-key go together")
		os.Exit(2)
	}

	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(hello)
	})
	if *dir != "" {
		handler = http.FileServer(http.Dir(*dir))
	}
	server := &http.Server{Handler: handler}
	if *h2c {
		server.Protocols = new(http.Protocols)
		server.Protocols.SetHTTP1(true)
		server.Protocols.SetUnencryptedHTTP2(true)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *cert != "" {
		fmt.Printf("https://%s/\n", ln.Addr())
		err = server.ServeTLS(ln, *cert, *key)
	} else {
		fmt.Printf("http://%s/\n", ln.Addr())
		err = server.Serve(ln)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
