// Command apiserver runs a real kube-apiserver (k8s.io/kubernetes) together
// with an embedded etcd in one process, for integration tests (envtest-style).
//
// Layout of --data-dir (everything the harness owns lives there):
//
//	pki/            self-signed CA, serving cert/key, service-account key
//	tokens.csv      static token file (admin + restricted user)
//	etcd/           etcd data (wiped at start unless --keep-etcd-data)
//	admin.kubeconfig, restricted.kubeconfig
//	ready           written once /readyz is ok and RBAC is set up; holds the port
//
// Stdout carries exactly one line, "READY https://127.0.0.1:PORT"; all logs
// go to stderr. SIGTERM/SIGINT stop the API server, then etcd; exit code 0.
//
// Extra arguments after "--" are passed to kube-apiserver verbatim.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// Users known to the static token authenticator.
const (
	adminUser      = "admin"
	restrictedUser = "restricted"
)

type options struct {
	dataDir        string
	keepEtcdData   bool
	port           int
	etcdPort       int
	etcdPeerPort   int
	readyTimeout   time.Duration
	etcdLogLevel   string
	exitWithParent bool
	extraArgs      []string
}

func main() {
	var o options
	flag.StringVar(&o.dataDir, "data-dir", "", "working directory for certs, tokens, kubeconfigs and etcd data (required)")
	flag.BoolVar(&o.exitWithParent, "exit-with-parent", false, "stop (as on SIGTERM) when the process that started this one exits, so test runs never leave a server behind")
	flag.BoolVar(&o.keepEtcdData, "keep-etcd-data", false, "keep existing etcd data (restart over the same data) instead of starting empty")
	flag.IntVar(&o.port, "port", 0, "kube-apiserver secure port on 127.0.0.1 (0 = pick a free port)")
	flag.IntVar(&o.etcdPort, "etcd-port", 0, "etcd client port on 127.0.0.1 (0 = pick a free port)")
	flag.IntVar(&o.etcdPeerPort, "etcd-peer-port", 0, "etcd peer port on 127.0.0.1 (0 = pick a free port)")
	flag.StringVar(&o.etcdLogLevel, "etcd-log-level", "warn", "embedded etcd log level (debug, info, warn, error, fatal)")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 3*time.Minute, "give up (and exit 1) if the API server is not ready by then")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s --data-dir DIR [flags] [-- extra kube-apiserver flags]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	o.extraArgs = flag.Args()
	if o.dataDir == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "apiserver harness: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return fmt.Errorf("resolve --data-dir: %w", err)
	}
	// Signals are ours from the start; they are handled by the loop at the
	// end of run (a signal during setup is acted upon once the server is up).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if o.exitWithParent {
		go watchParent(sigs)
	}

	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	_ = os.Remove(filepath.Join(dataDir, "ready"))

	pki, err := ensurePKI(filepath.Join(dataDir, "pki"))
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tokens, err := ensureTokens(filepath.Join(dataDir, "tokens.csv"))
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}

	ports, err := pickPorts(o.port, o.etcdPort, o.etcdPeerPort)
	if err != nil {
		return err
	}
	apiPort, etcdPort, peerPort := ports[0], ports[1], ports[2]

	// etcd first: the API server needs it to start.
	etcdDir := filepath.Join(dataDir, "etcd")
	if !o.keepEtcdData {
		if err := os.RemoveAll(etcdDir); err != nil {
			return fmt.Errorf("wipe etcd data: %w", err)
		}
	}
	etcd, err := startEtcd(etcdDir, etcdPort, peerPort, o.etcdLogLevel)
	if err != nil {
		return err
	}
	defer etcd.Close()

	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	for _, u := range []struct{ name, token string }{
		{adminUser, tokens.admin}, {restrictedUser, tokens.restricted},
	} {
		if err := writeKubeconfig(filepath.Join(dataDir, u.name+".kubeconfig"), server, pki.caPEM, u.name, u.token); err != nil {
			return fmt.Errorf("kubeconfig for %s: %w", u.name, err)
		}
	}

	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// Loopback endpoints are invalid in Endpoints objects; don't reconcile.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + pki.dir,
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--token-auth-file=" + tokens.file,
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + pki.saKey,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		// ServiceAccount admission needs the default SA, which only the
		// controller-manager creates; tests create Pods without one.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}
	args = append(args, o.extraArgs...)

	// NewAPIServerCommand installs kube-apiserver's own SIGTERM/SIGINT handler
	// (genericapiserver.SetupSignalContext). Take the signals back: cancelling
	// the server while its post-start hooks still run makes it exit through
	// klog.Fatal (status 255), so a stop during startup must wait until the
	// server is ready; genericapiserver.RequestShutdown then stops it.
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(args)
	signal.Reset(syscall.SIGTERM, syscall.SIGINT)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	apiDone := make(chan error, 1)
	go func() { apiDone <- cmd.Execute() }()

	// Readiness, RBAC, then announce.
	readyCtx, cancelReady := context.WithTimeout(context.Background(), o.readyTimeout)
	defer cancelReady()
	readyDone := make(chan error, 1)
	go func() {
		started := time.Now()
		readyDone <- func() error {
			if err := waitReady(readyCtx, server, pki.caPEM, tokens.admin); err != nil {
				return err
			}
			if err := grantRestricted(readyCtx, filepath.Join(dataDir, "admin.kubeconfig")); err != nil {
				return fmt.Errorf("rbac for %s: %w", restrictedUser, err)
			}
			if err := os.WriteFile(filepath.Join(dataDir, "ready"), []byte(strconv.Itoa(apiPort)+"\n"), 0o644); err != nil {
				return fmt.Errorf("write ready file: %w", err)
			}
			fmt.Fprintf(os.Stderr, "apiserver harness: ready after %s\n", time.Since(started).Round(time.Millisecond))
			fmt.Printf("READY %s\n", server)
			// Best effort: stdout may be /dev/null or a pipe, where fsync fails (EINVAL).
			_ = os.Stdout.Sync()
			return nil
		}()
	}()

	var (
		failure       error // why we are stopping on our own
		started       bool  // readiness finished (ok or not): safe to stop
		stopRequested bool  // a signal (or failure) asked for a stop
		stopSent      bool
	)
	// stop asks kube-apiserver to shut down: at once if now (etcd is gone, the
	// server cannot become ready), else as soon as startup has finished.
	stop := func(now bool) {
		stopRequested = true
		if (started || now) && !stopSent {
			stopSent = genericapiserver.RequestShutdown()
		}
	}
	for {
		select {
		case sig := <-sigs:
			if stopRequested {
				fmt.Fprintf(os.Stderr, "apiserver harness: second %v, exiting immediately\n", sig)
				os.Exit(1)
			}
			fmt.Fprintf(os.Stderr, "apiserver harness: %v, stopping\n", sig)
			stop(false)
		case err := <-readyDone:
			readyDone = nil
			started = true
			if err != nil && failure == nil {
				// Printed now: stopping a server that is not up may end the
				// process (klog.Fatal) before run returns.
				fmt.Fprintf(os.Stderr, "apiserver harness: not ready: %v\n", err)
				failure = err
			}
			if failure != nil || stopRequested {
				stop(false)
			}
		case err := <-etcd.Err():
			if failure == nil && !stopRequested {
				failure = fmt.Errorf("etcd failed: %w", err)
				fmt.Fprintf(os.Stderr, "apiserver harness: %v\n", failure)
				stop(true)
			}
		case err := <-apiDone:
			cancelReady()
			_ = os.Remove(filepath.Join(dataDir, "ready"))
			switch {
			case failure != nil:
				return failure
			case err != nil:
				return fmt.Errorf("kube-apiserver: %w", err)
			case !stopRequested:
				return errors.New("kube-apiserver exited without a stop request")
			}
			// etcd logs "server closed"/"use of closed network connection"
			// errors while closing; they are expected.
			fmt.Fprintln(os.Stderr, "apiserver harness: kube-apiserver stopped, closing etcd")
			return nil // deferred etcd.Close()
		}
	}
}

// pickPorts returns the requested ports, replacing each 0 by a free port on
// 127.0.0.1 (all listeners are held until every port is chosen, so the three
// are distinct). There is the usual small race between close and reuse.
func pickPorts(want ...int) ([]int, error) {
	out := make([]int, len(want))
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for i, p := range want {
		if p != 0 {
			out[i] = p
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick free port: %w", err)
		}
		held = append(held, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// etcdServer owns the embedded etcd instance.
type etcdServer struct{ e *embed.Etcd }

func (s *etcdServer) Err() <-chan error { return s.e.Err() }
func (s *etcdServer) Close()            { s.e.Close() }

// startEtcd starts a single-member etcd on 127.0.0.1 with data in dir and
// waits until it serves.
func startEtcd(dir string, clientPort, peerPort int, logLevel string) (*etcdServer, error) {
	cfg := embed.NewConfig()
	cfg.Name = "harness"
	cfg.Dir = dir
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// A test store: durability across crashes doesn't matter, speed does.
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = logLevel
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &etcdServer{e: e}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("etcd not ready after 60s")
	}
}

// waitReady polls GET /readyz with the admin token until it answers "ok".
func waitReady(ctx context.Context, server string, caPEM []byte, token string) error {
	client, err := httpsClient(caPEM)
	if err != nil {
		return err
	}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err == nil {
			body := readAll(resp)
			if resp.StatusCode == http.StatusOK && body == "ok" {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %.300s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready in time (last /readyz: %s)", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchParent asks for a clean stop once the parent process is gone (we are
// re-parented, so our parent pid changes).
func watchParent(sigs chan<- os.Signal) {
	parent := os.Getppid()
	for range time.Tick(500 * time.Millisecond) {
		if os.Getppid() != parent {
			sigs <- syscall.SIGTERM
			return
		}
	}
}
