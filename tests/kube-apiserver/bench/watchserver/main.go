// Command watchserver is the fake API server of the saturation benchmark
// (tests/benches/saturation.rs, run by `scripts/bench-informer --saturation`):
// it answers the list of Pods with an empty list, then streams a watch of
// --pods ADDED events of the realistic Pod (--fixture) as fast as the client
// reads them, encoded by apimachinery's own serializers in the content type the
// client asks for (JSON, or protobuf when its Accept header puts it first).
// Every frame is encoded before the server listens, so a watch costs the server
// one write per 256 KiB; after the last event it keeps the watch open.
//
// Plain HTTP on 127.0.0.1, no authentication. It prints JSON lines on stdout:
//
//	{"event":"listening","address":"127.0.0.1:PORT"}
//	{"event":"watch","contentType":"application/json","userAgent":"…"}   when a watch starts
//	{"event":"sent","contentType":"application/json","bytes":N,"ms":T}  when its last event is written
//
// It also answers the discovery of the core group (/api, /api/v1: pods only).
// Anything else it is asked for is answered 404 and logged on stderr.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

const (
	jsonType     = "application/json"
	protobufType = "application/vnd.kubernetes.protobuf"
	namePrefix   = "web-frontend-7d9f8b6c5d-"
)

// encoded is one content type's answers: the empty list and the whole watch stream.
type encoded struct {
	list        []byte
	watch       []byte
	watchHeader string
}

func main() {
	pods := flag.Int("pods", 50000, "ADDED events per watch")
	namespaces := flag.Int("namespaces", 4, "namespaces the Pods are spread over (bench-0, bench-1, …)")
	fixture := flag.String("fixture", "", "the realistic Pod (JSON) every event is a copy of (required)")
	address := flag.String("address", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	if *fixture == "" || *pods < 1 || *namespaces < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*fixture, *pods, *namespaces, *address); err != nil {
		fmt.Fprintf(os.Stderr, "watchserver: %v\n", err)
		os.Exit(1)
	}
}

func run(fixture string, pods, namespaces int, address string) error {
	raw, err := os.ReadFile(fixture)
	if err != nil {
		return err
	}
	var template corev1.Pod
	if err := json.Unmarshal(raw, &template); err != nil {
		return fmt.Errorf("%s is not a Pod: %w", fixture, err)
	}
	answers := map[string]*encoded{}
	for _, mediaType := range []string{jsonType, protobufType} {
		e, err := encode(&template, pods, namespaces, mediaType)
		if err != nil {
			return fmt.Errorf("encode %s: %w", mediaType, err)
		}
		answers[mediaType] = e
	}

	listener, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	out := &lines{}
	out.emit(map[string]any{"event": "listening", "address": listener.Addr().String()})
	return http.Serve(listener, &server{answers: answers, out: out})
}

// encode writes what a real API server would send, with the same serializers.
func encode(template *corev1.Pod, pods, namespaces int, mediaType string) (*encoded, error) {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok || info.StreamSerializer == nil {
		return nil, fmt.Errorf("no serializer")
	}
	objects := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)

	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Pod{}}
	var listBytes bytes.Buffer
	if err := objects.Encode(list, &listBytes); err != nil {
		return nil, err
	}

	var stream bytes.Buffer
	events := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&stream), info.StreamSerializer.Serializer)
	pod := template.DeepCopy()
	var object bytes.Buffer
	for i := 0; i < pods; i++ {
		pod.Name = fmt.Sprintf("%s%06d", namePrefix, i)
		pod.Namespace = fmt.Sprintf("bench-%d", i%namespaces)
		pod.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		pod.ResourceVersion = strconv.Itoa(2 + i)
		object.Reset()
		if err := objects.Encode(pod, &object); err != nil {
			return nil, err
		}
		event := &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: bytes.Clone(object.Bytes())}}
		if err := events.Encode(event); err != nil {
			return nil, err
		}
	}
	header := mediaType
	if mediaType == protobufType {
		header += ";stream=watch"
	}
	return &encoded{list: listBytes.Bytes(), watch: stream.Bytes(), watchHeader: header}, nil
}

type server struct {
	answers map[string]*encoded
	out     *lines
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mediaType := jsonType
	if strings.HasPrefix(r.Header.Get("Accept"), protobufType) {
		mediaType = protobufType
	}
	answer := s.answers[mediaType]
	query := r.URL.Query()
	switch {
	case r.URL.Path == "/api/v1/pods" && query.Get("sendInitialEvents") == "true":
		// A streaming list: the bench compares watch streams, so clients must list.
		http.Error(w, "watchserver: streaming lists are not served; list instead", http.StatusBadRequest)
	case r.URL.Path == "/api/v1/pods" && (query.Get("watch") == "1" || query.Get("watch") == "true"):
		s.out.emit(map[string]any{"event": "watch", "contentType": mediaType, "userAgent": r.UserAgent()})
		started := time.Now()
		w.Header().Set("Content-Type", answer.watchHeader)
		w.Header().Set("Transfer-Encoding", "chunked")
		w.WriteHeader(http.StatusOK)
		flusher := w.(http.Flusher)
		const chunk = 256 << 10
		for at := 0; at < len(answer.watch); at += chunk {
			end := min(at+chunk, len(answer.watch))
			if _, err := w.Write(answer.watch[at:end]); err != nil {
				fmt.Fprintf(os.Stderr, "watchserver: watch ended early: %v\n", err)
				return
			}
			flusher.Flush()
		}
		s.out.emit(map[string]any{"event": "sent", "contentType": mediaType, "bytes": len(answer.watch), "ms": time.Since(started).Milliseconds()})
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/pods":
		w.Header().Set("Content-Type", mediaType)
		_, _ = w.Write(answer.list)
	case r.URL.Path == "/api":
		writeJSON(w, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	case r.URL.Path == "/api/v1":
		writeJSON(w, &metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: "v1",
			APIResources: []metav1.APIResource{{
				Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod",
				Verbs: metav1.Verbs{"get", "list", "watch"},
			}},
		})
	default:
		fmt.Fprintf(os.Stderr, "watchserver: not served: %s %s\n", r.Method, r.URL)
		http.NotFound(w, r)
	}
}

// writeJSON answers a discovery request (clients that resolve kinds ask for it).
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", jsonType)
	_ = json.NewEncoder(w).Encode(v)
}

// lines writes JSON lines on stdout, one write each.
type lines struct{ mu sync.Mutex }

func (l *lines) emit(v any) {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = os.Stdout.Write(append(b, '\n'))
}
