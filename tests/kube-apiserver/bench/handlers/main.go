// Command handlers is the client-go peer of the saturation benchmark
// (tests/benches/saturation.rs, run by `scripts/bench-informer --saturation`):
// one SharedInformer of Pods from the typed informer factory, as a Go
// controller has it, with --handlers event handlers that do nothing but count
// (each handler runs on its own goroutine with its own buffer, as client-go
// delivers them). It prints JSON lines on stdout:
//
//	{"event":"done","handled":N}   once every handler has handled --pods adds
//
// --encoding json (the default here) asks for JSON, what wasmformer and kube-rs
// read; --encoding protobuf leaves client-go to its own choice for built-in
// types, protobuf. Logs go to stderr; SIGTERM exits 0.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (required)")
	pods := flag.Int64("pods", 0, "adds each handler must handle before `done` (required)")
	handlers := flag.Int("handlers", 3, "event handlers on the one informer")
	encoding := flag.String("encoding", "json", "json, or protobuf (client-go's own choice for built-in types)")
	flag.Parse()
	if *kubeconfig == "" || *pods < 1 || *handlers < 1 || (*encoding != "json" && *encoding != "protobuf") {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*kubeconfig, *pods, *handlers, *encoding); err != nil {
		fmt.Fprintf(os.Stderr, "handlers: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, pods int64, handlers int, encoding string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cfg.UserAgent = "wasmformer-bench-handlers"
	// Left unset, a typed client of client-go 0.37 asks for protobuf; JSON must be asked for.
	if encoding == "json" {
		cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	}
	clients, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("typed client: %w", err)
	}
	factory := informers.NewSharedInformerFactory(clients, 0)
	informer := factory.Core().V1().Pods().Informer()

	// Each handler counts its adds; the one that brings the number of finished
	// handlers to --handlers says so.
	var finished atomic.Int64
	done := make(chan struct{})
	for range handlers {
		var adds atomic.Int64
		_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) {
				if adds.Add(1) == pods && finished.Add(1) == int64(handlers) {
					close(done)
				}
			},
			UpdateFunc: func(any, any) {},
			DeleteFunc: func(any) {},
		})
		if err != nil {
			return fmt.Errorf("add event handler: %w", err)
		}
	}
	factory.Start(ctx.Done())
	select {
	case <-ctx.Done():
		return nil
	case <-done:
	}
	line, _ := json.Marshal(map[string]any{"event": "done", "handled": pods})
	_, _ = os.Stdout.Write(append(line, '\n'))
	<-ctx.Done()
	return nil
}
