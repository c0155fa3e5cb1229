// Command informer runs one client-go SharedInformer and prints every handler
// callback as a JSON line on stdout:
//
//	{"event":"add","namespace":"ns","name":"x","resourceVersion":"12","initial":true,"finalStateUnknown":false}
//	{"event":"synced"}
//	{"event":"stats","rssBytes":123,"objects":4}   (with --stats-every)
//
// It is the reference Go client for wasmformer's tests and memory benchmark.
// Built-in resources use the typed informer factory (what a typical Go
// controller uses); other resources (CRDs) or --mode=dynamic use the dynamic
// (unstructured) informer. Logs go to stderr; SIGTERM/SIGINT exit 0.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

type options struct {
	kubeconfig    string
	resource      string
	namespace     string
	labelSelector string
	fieldSelector string
	mode          string
	resync        time.Duration
	statsEvery    time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG / in-cluster rules)")
	flag.StringVar(&o.resource, "resource", "", "resource to watch: pods, configmaps, deployments.apps, widgets.v1.example.com, ... (required)")
	flag.StringVar(&o.namespace, "namespace", "", "namespace to watch (default: all)")
	flag.StringVar(&o.labelSelector, "label-selector", "", "label selector for list/watch")
	flag.StringVar(&o.fieldSelector, "field-selector", "", "field selector for list/watch")
	flag.StringVar(&o.mode, "mode", "typed", "typed (built-in types, falls back to dynamic) or dynamic")
	flag.DurationVar(&o.resync, "resync", 0, "informer resync period (0 = none)")
	flag.DurationVar(&o.statsEvery, "stats-every", 0, "print a stats line (RSS, cached objects) at this interval (0 = never)")
	flag.Parse()
	if o.resource == "" || (o.mode != "typed" && o.mode != "dynamic") {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "informer: %v\n", err)
		os.Exit(1)
	}
}

// out serialises JSON lines onto stdout, one flush per line.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "informer: marshal: %v\n", err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
	_ = o.w.Flush()
}

type eventLine struct {
	Event             string `json:"event"`
	Namespace         string `json:"namespace"`
	Name              string `json:"name"`
	ResourceVersion   string `json:"resourceVersion"`
	Initial           bool   `json:"initial"`
	FinalStateUnknown bool   `json:"finalStateUnknown"`
}

type statsLine struct {
	Event     string `json:"event"`
	RSSBytes  int64  `json:"rssBytes"`
	Objects   int    `json:"objects"`
	HeapBytes uint64 `json:"heapInuseBytes"`
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cfg.UserAgent = "wasmformer-harness-informer"

	gvr, err := resolveResource(cfg, o.resource)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "informer: watching %s (mode %s)\n", gvr, o.mode)

	tweak := func(lo *metav1.ListOptions) {
		lo.LabelSelector = o.labelSelector
		lo.FieldSelector = o.fieldSelector
	}
	informer, start, err := newInformer(cfg, gvr, o, tweak)
	if err != nil {
		return err
	}

	w := &out{w: bufio.NewWriter(os.Stdout)}
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			w.emit(line("add", obj, isInInitialList, false))
		},
		UpdateFunc: func(_, obj any) {
			w.emit(line("update", obj, false, false))
		},
		DeleteFunc: func(obj any) {
			unknown := false
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj, unknown = d.Obj, true
			}
			w.emit(line("delete", obj, false, unknown))
		},
	})
	if err != nil {
		return fmt.Errorf("add event handler: %w", err)
	}

	start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil // stopped before sync (signal)
	}
	w.emit(map[string]string{"event": "synced"})

	var tick <-chan time.Time
	if o.statsEvery > 0 {
		t := time.NewTicker(o.statsEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			w.emit(statsLine{Event: "stats", RSSBytes: rssBytes(), Objects: len(informer.GetStore().ListKeys()), HeapBytes: ms.HeapInuse})
		}
	}
}

// resolveResource maps "pods", "deployments.apps" or "deployments.v1.apps"
// to a full GroupVersionResource through discovery.
func resolveResource(cfg *rest.Config, arg string) (schema.GroupVersionResource, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	fq, gr := schema.ParseResourceArg(strings.ToLower(arg))
	if fq != nil {
		if gvr, err := mapper.ResourceFor(*fq); err == nil {
			return gvr, nil
		}
	}
	gvr, err := mapper.ResourceFor(gr.WithVersion(""))
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("resolve resource %q: %w", arg, err)
	}
	return gvr, nil
}

// newInformer builds the informer for gvr and returns a function that starts it.
func newInformer(cfg *rest.Config, gvr schema.GroupVersionResource, o options, tweak func(*metav1.ListOptions)) (cache.SharedIndexInformer, func(<-chan struct{}), error) {
	if o.mode == "typed" {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("typed client: %w", err)
		}
		f := informers.NewSharedInformerFactoryWithOptions(cs, o.resync,
			informers.WithNamespace(o.namespace), informers.WithTweakListOptions(tweak))
		if gi, err := f.ForResource(gvr); err == nil {
			inf := gi.Informer()
			return inf, f.Start, nil
		}
		fmt.Fprintf(os.Stderr, "informer: %s is not a built-in type, using the dynamic informer\n", gvr)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("dynamic client: %w", err)
	}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, o.resync, o.namespace, tweak)
	inf := f.ForResource(gvr).Informer()
	return inf, f.Start, nil
}

func line(event string, obj any, initial, unknown bool) eventLine {
	l := eventLine{Event: event, Initial: initial, FinalStateUnknown: unknown}
	if m, err := meta.Accessor(obj); err == nil {
		l.Namespace, l.Name, l.ResourceVersion = m.GetNamespace(), m.GetName(), m.GetResourceVersion()
	} else if key, ok := obj.(string); ok { // should not happen; keep the key at least
		l.Namespace, l.Name, _ = cache.SplitMetaNamespaceKey(key)
	}
	return l
}

// rssBytes reads VmRSS from /proc/self/status (0 if unavailable).
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest) // "12345 kB"
			if len(fields) > 0 {
				kb, _ := strconv.ParseInt(fields[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
