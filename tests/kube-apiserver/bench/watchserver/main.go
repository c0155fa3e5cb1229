// Command watchserver is the fake API server of the saturation benchmark
// (tests/benches/saturation.rs, run by `scripts/bench-informer --saturation`).
// With --mode watch it answers the list of Pods with an empty list, then streams
// a watch of --pods ADDED events of the realistic Pod (--fixture) as fast as the
// client reads them; with --mode list it answers the list with all --pods Pods
// (in pages of 500 when the client asks for a limit of 500, as client-go,
// kube-rs and wasmformer do; in one response without a limit) and holds the
// watch open with no event. Everything is encoded by apimachinery's own
// serializers in the content type the client asks for (JSON, or protobuf when
// its Accept header puts it first), before the server listens, so an answer
// costs the server one write per 256 KiB.
//
// Plain HTTP on 127.0.0.1, no authentication. It prints JSON lines on stdout:
//
//	{"event":"listening","address":"127.0.0.1:PORT"}
//	{"event":"list","contentType":"…","userAgent":"…","limit":"500"}     when a list's first page is asked for
//	{"event":"watch","contentType":"application/json","userAgent":"…"}   when a watch starts
//	{"event":"sent","contentType":"application/json","bytes":N,"ms":T}  when a whole watch or unpaged list is written
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

// pageSize is the only limit served in pages.
const pageSize = 500

// encoded is one content type's answers: the list, whole and in pages, and the
// whole watch stream.
type encoded struct {
	list        []byte
	pages       [][]byte
	watch       []byte
	watchHeader string
}

func main() {
	pods := flag.Int("pods", 50000, "ADDED events per watch")
	namespaces := flag.Int("namespaces", 4, "namespaces the Pods are spread over (bench-0, bench-1, …)")
	fixture := flag.String("fixture", "", "the realistic Pod (JSON) every event is a copy of (required)")
	address := flag.String("address", "127.0.0.1:0", "address to listen on")
	mode := flag.String("mode", "watch", "watch: the Pods come as watch events; list: in the list")
	flag.Parse()
	if *fixture == "" || *pods < 1 || *namespaces < 1 || (*mode != "watch" && *mode != "list") {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*fixture, *pods, *namespaces, *address, *mode == "list"); err != nil {
		fmt.Fprintf(os.Stderr, "watchserver: %v\n", err)
		os.Exit(1)
	}
}

func run(fixture string, pods, namespaces int, address string, inList bool) error {
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
		e, err := encode(&template, pods, namespaces, mediaType, inList)
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

// encode writes what a real API server would send, with the same serializers:
// the Pods in the list (inList) or as the watch's events.
func encode(template *corev1.Pod, pods, namespaces int, mediaType string, inList bool) (*encoded, error) {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok || info.StreamSerializer == nil {
		return nil, fmt.Errorf("no serializer")
	}
	objects := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)

	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Pod{}}
	var stream bytes.Buffer
	events := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&stream), info.StreamSerializer.Serializer)
	var object bytes.Buffer
	for i := 0; i < pods; i++ {
		pod := template.DeepCopy()
		pod.Name = fmt.Sprintf("%s%06d", namePrefix, i)
		pod.Namespace = fmt.Sprintf("bench-%d", i%namespaces)
		pod.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		pod.ResourceVersion = strconv.Itoa(2 + i)
		if inList {
			list.Items = append(list.Items, *pod)
			list.ResourceVersion = pod.ResourceVersion
			continue
		}
		object.Reset()
		if err := objects.Encode(pod, &object); err != nil {
			return nil, err
		}
		event := &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: bytes.Clone(object.Bytes())}}
		if err := events.Encode(event); err != nil {
			return nil, err
		}
	}
	var listBytes bytes.Buffer
	if err := objects.Encode(list, &listBytes); err != nil {
		return nil, err
	}
	var pages [][]byte
	for at := 0; at < len(list.Items) || at == 0; at += pageSize {
		page := &corev1.PodList{ListMeta: list.ListMeta, Items: list.Items[at:min(at+pageSize, len(list.Items))]}
		if at+pageSize < len(list.Items) {
			page.Continue = strconv.Itoa(at + pageSize)
		}
		var pageBytes bytes.Buffer
		if err := objects.Encode(page, &pageBytes); err != nil {
			return nil, err
		}
		pages = append(pages, pageBytes.Bytes())
	}
	header := mediaType
	if mediaType == protobufType {
		header += ";stream=watch"
	}
	return &encoded{list: listBytes.Bytes(), pages: pages, watch: stream.Bytes(), watchHeader: header}, nil
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
		w.Header().Set("Content-Type", answer.watchHeader)
		if s.send(w, answer.watch, mediaType) {
			<-r.Context().Done()
		}
	case r.URL.Path == "/api/v1/pods":
		from, _ := strconv.Atoi(query.Get("continue"))
		if from == 0 {
			s.out.emit(map[string]any{"event": "list", "contentType": mediaType, "userAgent": r.UserAgent(), "limit": query.Get("limit")})
		}
		w.Header().Set("Content-Type", mediaType)
		switch limit := query.Get("limit"); {
		case limit == "" || limit == "0":
			s.send(w, answer.list, mediaType)
		case limit == strconv.Itoa(pageSize) && from%pageSize == 0 && from/pageSize < len(answer.pages):
			_, _ = w.Write(answer.pages[from/pageSize])
		default:
			w.Header().Del("Content-Type")
			http.Error(w, fmt.Sprintf("watchserver: only pages of %d are served (limit %s, continue %d)", pageSize, limit, from), http.StatusBadRequest)
		}
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

// send writes body in chunks of 256 KiB, each flushed, and says when it is
// written; false if the client went away first.
func (s *server) send(w http.ResponseWriter, body []byte, mediaType string) bool {
	started := time.Now()
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	const chunk = 256 << 10
	for at := 0; at < len(body); at += chunk {
		if _, err := w.Write(body[at:min(at+chunk, len(body))]); err != nil {
			fmt.Fprintf(os.Stderr, "watchserver: answer ended early: %v\n", err)
			return false
		}
		flusher.Flush()
	}
	if len(body) > chunk {
		s.out.emit(map[string]any{"event": "sent", "contentType": mediaType, "bytes": len(body), "ms": time.Since(started).Milliseconds()})
	}
	return true
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
