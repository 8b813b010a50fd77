package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Config says which parts of the control plane to start.
type Config struct {
	// Dir holds the state (etcd data, certificates, logs, kubeconfig). It
	// is created if missing. Empty means a new temporary directory, removed
	// by Stop.
	Dir string
	// ControllerManager starts kube-controller-manager with the workload
	// controllers (deployment, replicaset, statefulset, job,
	// garbagecollector, namespace).
	ControllerManager bool
	// Kwok starts kwok managing nodes annotated kwok.x-k8s.io/node=fake.
	Kwok bool
	// CRDs are manifests installed once the API server is ready.
	CRDs [][]byte
	// StartTimeout bounds the start of each component (default 60 s).
	StartTimeout time.Duration
	// APIServerRequestTimeout is kube-apiserver's --request-timeout (0: its
	// default, 60 s). kube-apiserver keeps max(75 s, it + 15 s) of watch
	// history, so a watch can resume only after a list shorter than that.
	APIServerRequestTimeout time.Duration
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	Dir        string
	Kubeconfig string
	Host       string
	Token      string
	removeDir  bool
	procs      []*process // in start order
}

// Start builds nothing: it runs the binaries found by FindBinaries. On error
// everything already started is stopped.
func Start(ctx context.Context, cfg Config) (cp *ControlPlane, err error) {
	bins, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	cp = &ControlPlane{Dir: cfg.Dir}
	if cp.Dir == "" {
		d, err := os.MkdirTemp("", "shardsched-cp-")
		if err != nil {
			return nil, err
		}
		cp.Dir, cp.removeDir = d, true
	} else if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cp.Stop()
			cp = nil
		}
	}()

	// etcd 3.6 for the API server.
	etcdClient, err := FreePort()
	if err != nil {
		return cp, err
	}
	etcdPeer, err := FreePort()
	if err != nil {
		return cp, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := startProcess("etcd", cp.Dir, bins.Etcd,
		"--data-dir="+filepath.Join(cp.Dir, "etcd-data"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--name=default",
		"--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=8589934592")
	if err != nil {
		return cp, err
	}
	cp.procs = append(cp.procs, etcd)
	if err := waitHTTP(ctx, etcd, etcdURL+"/health", nil, cfg.StartTimeout); err != nil {
		return cp, err
	}

	// kube-apiserver with a static admin token.
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return cp, err
	}
	cp.Token = hex.EncodeToString(tok)
	tokens := filepath.Join(cp.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(cp.Token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return cp, err
	}
	saKey, saPub, err := writeServiceAccountKeys(cp.Dir)
	if err != nil {
		return cp, err
	}
	apiPort, err := FreePort()
	if err != nil {
		return cp, err
	}
	cp.Host = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	apiArgs := []string{"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition", // no node-lifecycle controller runs to lift the not-ready taint from kwok nodes
		"--endpoint-reconciler-type=none",
		"--max-requests-inflight=4000", "--max-mutating-requests-inflight=2000",
		"--enable-priority-and-fairness=false",
		"--v=0"}
	if cfg.APIServerRequestTimeout > 0 {
		apiArgs = append(apiArgs, "--request-timeout="+cfg.APIServerRequestTimeout.String())
	}
	api, err := startProcess("kube-apiserver", cp.Dir, bins.KubeAPIServer, apiArgs...)
	if err != nil {
		return cp, err
	}
	cp.procs = append(cp.procs, api)
	if err := waitHTTP(ctx, api, cp.Host+"/readyz", map[string]string{"Authorization": "Bearer " + cp.Token}, cfg.StartTimeout); err != nil {
		return cp, err
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	if err := cp.writeKubeconfig(); err != nil {
		return cp, err
	}
	if len(cfg.CRDs) > 0 {
		if err := InstallCRDs(ctx, cp.RESTConfig(), cfg.CRDs, cfg.StartTimeout); err != nil {
			return cp, err
		}
	}

	if cfg.ControllerManager {
		kcm, err := startProcess("kube-controller-manager", cp.Dir, bins.KubeControllerManager,
			"--kubeconfig="+cp.Kubeconfig,
			"--controllers=deployment,replicaset,statefulset,job,garbagecollector,namespace",
			"--leader-elect=false",
			"--bind-address=127.0.0.1", "--secure-port=0",
			"--kube-api-qps=1000", "--kube-api-burst=2000",
			"--concurrent-replicaset-syncs=16", "--concurrent-deployment-syncs=8",
			"--v=0")
		if err != nil {
			return cp, err
		}
		cp.procs = append(cp.procs, kcm)
		time.Sleep(200 * time.Millisecond)
		if kcm.exited() {
			return cp, kcm.failure("failed to start")
		}
	}
	if cfg.Kwok {
		args := []string{
			"--kubeconfig=" + cp.Kubeconfig,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--node-lease-duration-seconds=0",
			"--cidr=10.64.0.0/12",
			"--node-ip=127.0.0.1",
		}
		stages, err := filepath.Glob(filepath.Join(bins.KwokStages, "*.yaml"))
		if err != nil || len(stages) == 0 {
			return cp, fmt.Errorf("no kwok stage manifests in %s", bins.KwokStages)
		}
		for _, s := range stages {
			args = append(args, "--config="+s)
		}
		kw, err := startProcess("kwok", cp.Dir, bins.Kwok, args...)
		if err != nil {
			return cp, err
		}
		cp.procs = append(cp.procs, kw)
		time.Sleep(200 * time.Millisecond)
		if kw.exited() {
			return cp, kw.failure("failed to start")
		}
	}
	return cp, nil
}

// RESTConfig returns a client config for the admin user.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.Host,
		BearerToken:     cp.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             5000,
		Burst:           10000,
	}
}

// Stop stops every process (last started first) and removes the state
// directory if Start created it. Safe to call more than once.
func (cp *ControlPlane) Stop() {
	if cp == nil {
		return
	}
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].stop(10 * time.Second)
	}
	cp.procs = nil
	if cp.removeDir {
		_ = os.RemoveAll(cp.Dir)
	}
}

// PIDs names the process of each running part of the control plane
// (etcd, kube-apiserver, kube-controller-manager, kwok), for a bench that
// reads what each one costs.
func (cp *ControlPlane) PIDs() map[string]int {
	out := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		if !p.exited() {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

// Check returns an error if any process has exited.
func (cp *ControlPlane) Check() error {
	for _, p := range cp.procs {
		if p.exited() {
			return p.failure("exited")
		}
	}
	return nil
}

func (cp *ControlPlane) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["shardsched"] = &clientcmdapi.Cluster{Server: cp.Host, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cp.Token}
	cfg.Contexts["shardsched"] = &clientcmdapi.Context{Cluster: "shardsched", AuthInfo: "admin"}
	cfg.CurrentContext = "shardsched"
	return clientcmd.WriteToFile(*cfg, cp.Kubeconfig)
}

func writeServiceAccountKeys(dir string) (keyPath, pubPath string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyPath, pubPath = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return "", "", err
	}
	return keyPath, pubPath, nil
}

// waitHTTP polls url until it answers 200, the process exits, or timeout.
func waitHTTP(ctx context.Context, p *process, url string, headers map[string]string, timeout time.Duration) error {
	alive := func() error {
		if p.exited() {
			return p.failure("exited before it was ready")
		}
		return nil
	}
	last, err := WaitHTTPOK(ctx, url, headers, timeout, alive)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errors.Join(ctx.Err(), p.failure("start cancelled"))
	case last != "":
		return p.failure(fmt.Sprintf("not ready after %s (%s)", timeout, last))
	default:
		return err
	}
}

// WaitHTTPOK polls url (TLS certificates are not checked: loopback,
// self-signed) every 100 ms until it answers 200 OK. It gives up when alive
// returns an error (the server's process died), when ctx ends, or after
// timeout; last is the last answer or error seen (empty when it gave up for
// another reason than the timeout).
func WaitHTTPOK(ctx context.Context, url string, headers map[string]string, timeout time.Duration, alive func() error) (last string, err error) {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback with a self-signed cert
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	last = "no answer"
	for {
		if alive != nil {
			if err := alive(); err != nil {
				return "", err
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return "", nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("%s not ready after %s (%s)", url, timeout, last)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
