// workqueue: the client-go side of wasmformer's work-queue benchmark (scripts/bench-workqueue,
// tests/bench-queue/main.rs does the same on wasmformer's queue). client-go's
// util/workqueue with DefaultTypedControllerRateLimiter (5ms..1000s per key, 10 qps, burst 100),
// string keys "ns/name-<i>", one goroutine:
//
//   - dedup: every key added twice, then drained: Get, a no-op reconcile, Forget, Done;
//   - ratelimited: every key's AddRateLimited (its first failure: the max of the key's backoff
//     and the bucket), then Forget (the keys are scheduled, not waited for);
//   - memory: the live heap per queued key after N keys are added (key strings included).
//
// Prints one JSON line.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{},
	)
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.HeapAlloc
}

func main() {
	n := flag.Int("keys", 200000, "distinct keys")
	flag.Parse()
	keys := make([]string, *n)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/name-%d", i)
	}

	q := newQueue()
	start := time.Now()
	for _, k := range keys {
		q.Add(k)
	}
	for _, k := range keys {
		q.Add(k)
	}
	for range keys {
		k, _ := q.Get()
		q.Forget(k)
		q.Done(k)
	}
	dedup := time.Since(start).Seconds()
	if q.Len() != 0 {
		fmt.Fprintln(os.Stderr, "queue not drained")
		os.Exit(1)
	}
	q.ShutDown()

	q = newQueue()
	start = time.Now()
	for _, k := range keys {
		q.AddRateLimited(k)
		q.Forget(k)
	}
	limited := time.Since(start).Seconds()
	q.ShutDown()

	// Memory: the key strings are made after the baseline, so they count, as in the Rust bench.
	before := heap()
	q = newQueue()
	for i := 0; i < *n; i++ {
		q.Add(fmt.Sprintf("ns/name-%d", i))
	}
	after := heap()
	runtime.KeepAlive(q)
	out, _ := json.Marshal(map[string]any{
		"keys":                 *n,
		"dedupKeysPerSecond":   float64(*n) / dedup,
		"rateLimitedPerSecond": float64(*n) / limited,
		"bytesPerQueuedKey":    float64(after-before) / float64(*n),
	})
	fmt.Println(string(out))
}
