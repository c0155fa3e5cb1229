// applier: the client-go side of wasmformer's write benchmark. It server-side applies N
// ConfigMaps (<prefix>-0 … <prefix>-N-1, data {"i": "<i>"}) one after another, as field manager
// --field-manager, and prints {"writes":N,"seconds":S,"writesPerSecond":W} as one JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "default", "namespace")
	prefix := flag.String("prefix", "go", "ConfigMap name prefix")
	count := flag.Int("count", 1000, "ConfigMaps to apply")
	manager := flag.String("field-manager", "wasmformer/probe", "field manager")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The same rate limit as the plugin in the benchmark: none that binds.
	config.QPS, config.Burst = 1e6, 1e6
	client := kubernetes.NewForConfigOrDie(config)
	ctx := context.Background()
	started := time.Now()
	for i := 0; i < *count; i++ {
		cm := corev1ac.ConfigMap(*prefix+"-"+strconv.Itoa(i), *namespace).WithData(map[string]string{"i": strconv.Itoa(i)})
		if _, err := client.CoreV1().ConfigMaps(*namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: *manager}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	seconds := time.Since(started).Seconds()
	out, _ := json.Marshal(map[string]any{"writes": *count, "seconds": seconds, "writesPerSecond": float64(*count) / seconds})
	fmt.Println(string(out))
}
