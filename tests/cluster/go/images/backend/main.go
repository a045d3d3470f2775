// Command backend is the HTTP server behind the test Services of tests/cluster: every
// request is answered with one line naming the Pod, its node and its version, read from
// the environment (POD_NAME and NODE_NAME from the downward API, VERSION), and the
// client's address as the server saw it:
//
//	pod=backend-7d9c-x2v4q node=node-2 version=1 client=172.31.0.100:40122
//
// Two more paths show the Pod's DNS as its processes see it: /resolv.conf answers the
// file kubelet wrote, /resolve?name=NAME the addresses Go's resolver (pure Go: it reads
// that file, search domains and ndots included) finds for NAME, space-separated (502 and
// the error when it finds none).
//
// It listens on every address (IPv4 and IPv6) at $PORT (default 8080). On SIGTERM it
// keeps serving for $SHUTDOWN_DELAY (a Go duration, default 5s: the time kube-proxy
// needs to drop the endpoint everywhere), then stops accepting and finishes the
// requests in flight.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

func main() {
	delay, err := time.ParseDuration(env("SHUTDOWN_DELAY", "5s"))
	if err != nil {
		log.Fatalf("SHUTDOWN_DELAY: %v", err)
	}
	line := fmt.Sprintf("pod=%s node=%s version=%s",
		env("POD_NAME", "unknown"), env("NODE_NAME", "unknown"), env("VERSION", "0"))
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/resolv.conf", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, "/etc/resolv.conf")
	})
	mux.HandleFunc("/resolve", func(w http.ResponseWriter, r *http.Request) {
		addrs, err := net.DefaultResolver.LookupHost(r.Context(), r.URL.Query().Get("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, strings.Join(addrs, " "))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s client=%s\n", line, r.RemoteAddr)
	})
	server := &http.Server{Addr: ":" + env("PORT", "8080"), Handler: mux}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		log.Printf("signal: serving %s more, then shutting down", delay)
		time.Sleep(delay)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
	}()
	log.Printf("%s listening on %s", line, server.Addr)
	if err := server.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
