package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/shardsched/shardsched/internal/cluster"
	"github.com/shardsched/shardsched/internal/testenv"
)

// refusePodGroupLists answers every list and watch of PodGroups with a 503
// (client-go lists through a watch, sendInitialEvents), so that the shard's
// informers never sync; everything else reaches the API server.
type refusePodGroupLists struct{ next http.RoundTripper }

func (r refusePodGroupLists) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/podgroups") {
		return &http.Response{
			StatusCode: http.StatusServiceUnavailable,
			Status:     "503 Service Unavailable",
			Header:     http.Header{"Content-Type": {"text/plain"}},
			Body:       io.NopCloser(strings.NewReader("the test refuses PodGroup lists")),
			Request:    req,
		}, nil
	}
	return r.next.RoundTrip(req)
}

// A shard still listing the cluster is live but not ready: /healthz and
// /metrics answer (with the start-up steps done so far), /readyz says 503
// and why, the ready callback is not called; stopped then, Run returns nil
// (a clean stop, not an error) and its HTTP server is gone.
func TestWarmingUpShardIsLiveNotReadyAndStopsCleanly(t *testing.T) {
	cfg := rest.CopyConfig(cp.Require(t))
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return refusePodGroupLists{rt} })
	e := testenv.NewEtcd(t)

	var readyCalled atomic.Bool
	var addr string
	var done chan error
	var cancel context.CancelFunc
	// The port is picked free beforehand (the endpoints must be reached
	// before the daemon can say where it listens): taken in between, the
	// start is tried again.
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		_ = ln.Close()
		opts := testOptions(cfg, "shard-0", e.Endpoints, nil)
		opts.HTTPAddr = addr
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		done = make(chan error, 1)
		go func() { done <- Run(ctx, opts, func(*Daemon) { readyCalled.Store(true) }) }()
		// The daemon ending (its port taken) stops the wait at once.
		_, err = cluster.WaitHTTPOK(context.Background(), "http://"+addr+"/healthz", nil, 60*time.Second, func() error {
			select {
			case err := <-done:
				return fmt.Errorf("the daemon ended before /healthz answered: %v", err)
			default:
				return nil
			}
		})
		if err == nil {
			break
		}
		t.Log(err)
		cancel()
		if attempt == 2 {
			t.Fatalf("the shard never served /healthz on %s", addr)
		}
	}
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	// The other informers sync; /readyz then names the one it waits for.
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, body := get(t, addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.HasSuffix(strings.TrimSpace(body), "waiting for the informers of podgroups")
	}, "/readyz names the podgroups informer alone as what the shard waits for")
	// Several reads over a few seconds: the PodGroups keep failing to be
	// listed, so the shard stays live and not ready.
	for range 3 {
		code, body := get(t, addr, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "podgroups") {
			t.Fatalf("/readyz while the PodGroups cannot be listed: %d %q, want 503 naming the podgroups informer", code, body)
		}
		if code, _ := get(t, addr, "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz while warming up: %d, want 200", code)
		}
		time.Sleep(time.Second)
	}
	m := scrapeAt(t, addr)
	for _, step := range []string{"clients", "parts", "serving"} {
		if _, ok := m[`shardsched_startup_step_end_seconds{step="`+step+`"}`]; !ok {
			t.Errorf("step %s is not exported while warming up", step)
		}
	}
	for _, step := range []string{"informers", "scheduling"} {
		if v, ok := m[`shardsched_startup_step_end_seconds{step="`+step+`"}`]; ok {
			t.Errorf("step %s exported as done (%v s) while the informers cannot list", step, v)
		}
	}
	if readyCalled.Load() {
		t.Fatal("the ready callback was called while the informers cannot list")
	}

	cancel()
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a shard stopped while warming up returned %v, want a clean stop", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60 s of being stopped while warming up")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("the shard's HTTP server still answers after Run returned")
	}
}

// get returns the status code and body of addr+path.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// podRequests records, of the requests for all pods, how many were plain
// lists and how many asked for the initial state as watch events.
type podRequests struct {
	next                  http.RoundTripper
	lists, initialStreams *atomic.Int64
}

func (r podRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Path == "/api/v1/pods" {
		q := req.URL.Query()
		switch {
		case q.Get("sendInitialEvents") == "true":
			r.initialStreams.Add(1)
		case q.Get("watch") == "" || q.Get("watch") == "false":
			r.lists.Add(1)
		}
	}
	return r.next.RoundTrip(req)
}

// The pods' reflector takes its initial state as client-go's watch-list (a
// stream of watch events) unless Options.ListFirst asks for a list first.
func TestInformersWatchListUnlessListFirst(t *testing.T) {
	for _, listFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("ListFirst=%v", listFirst), func(t *testing.T) {
			var lists, streams atomic.Int64
			cfg := rest.CopyConfig(cp.Require(t))
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
				return podRequests{next: rt, lists: &lists, initialStreams: &streams}
			})
			e := testenv.NewEtcd(t)
			_, _, stop := runDaemon(t, cfg, "shard-0", e.Endpoints, nil, func(o *Options) { o.ListFirst = listFirst })
			stop()
			switch {
			case listFirst && (lists.Load() == 0 || streams.Load() != 0):
				t.Fatalf("lists of pods %d, watch-list streams %d: want the pods listed, no stream", lists.Load(), streams.Load())
			case !listFirst && streams.Load() == 0:
				t.Fatalf("lists of pods %d, watch-list streams %d: want a watch-list stream", lists.Load(), streams.Load())
			}
		})
	}
}
