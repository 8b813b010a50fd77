package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shardsched/shardsched/internal/testenv"
)

// chromium finds the browser the UI test drives: $CHROMIUM, else Debian's
// /usr/bin/chromium (.ci/run installs it). Outside CI a missing browser
// skips the test; in CI it fails it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "chromium"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if testenv.InCI() {
		t.Fatal("CI is set and no Chromium was found (.ci/run installs Debian's chromium; or set $CHROMIUM)")
	}
	t.Skip("no Chromium: install Debian's chromium or set $CHROMIUM")
	return ""
}

// artifactDir is where tests leave files for people to look at:
// $SHARDSCHED_ARTIFACTS, else <repo>/bin/artifacts (git-ignored).
func artifactDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("SHARDSCHED_ARTIFACTS")
	if d == "" {
		d = filepath.Join("..", "..", "bin", "artifacts")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestWebUIInARealBrowser opens the shard's web UI in headless Chromium: the
// page shows the shard, the queue tree that exists and a gang waiting for
// quota with the scheduler's reason; when the pod holding the quota goes
// and the gang is bound, the open page updates by itself (binds counted,
// the gang gone from the waiting list, the queue's allocation). A
// screenshot is kept as a test artefact.
func TestWebUIInARealBrowser(t *testing.T) {
	browser := chromium(t)
	ev := newEnv(t)
	ev.nodes("ui-node", 2, "8", "32Gi")
	ev.queue("ui-research", "root", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")})
	ev.queue("ui-nlp", "ui-research", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6")})
	// A holder takes 4 of ui-nlp's 6 CPU; the gang asks 2 × 2 and waits
	// for quota, with the scheduler's reason on its PodGroup.
	ev.podGroup("ui-hold", "ui-nlp", 1)
	ev.pod("ui-hold-0", "ui-hold", "4", "1Gi", nil)
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.nodeOf("ui-hold-0") != "" }, "the holder is bound")
	ev.podGroup("ui-gang", "ui-nlp", 2)
	ev.pod("ui-gang-0", "ui-gang", "2", "1Gi", nil)
	ev.pod("ui-gang-1", "ui-gang", "2", "1Gi", nil)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		// This machine has no internet: without these Chromium keeps
		// trying Google's hosts in the background.
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	url := "http://" + ev.http + "/ui/"
	job := ev.ns + "/ui-gang"
	// The first action starts the browser; its context must not time out
	// (that would stop the browser), later ones are bounded.
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("the page never showed %s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	wait("the queue ui-nlp", `document.querySelector('#queues tr[data-queue="ui-nlp"]') !== null`)
	wait("the waiting gang with a reason", fmt.Sprintf(`(document.querySelector('#waiting tr[data-job=%q] td.why') || {textContent: ""}).textContent.length > 0`, job))
	shards, waiting := text(`#shards`), text(`#waiting`)
	if !strings.Contains(shards, "shard-0 (this one)") || !strings.Contains(shards, "leader") {
		t.Errorf("shards table: %q", shards)
	}
	if !strings.Contains(waiting, "ui-nlp") || !strings.Contains(waiting, "QueueQuotaExceeded") {
		t.Errorf("waiting table: %q", waiting)
	}
	t.Logf("waiting, as the page shows it: %s", strings.Join(strings.Fields(waiting), " "))

	// The holder's pod is deleted (its PodGroup stays, holding nothing):
	// the gang is bound, and the open page follows.
	if err := ev.cs.CoreV1().Pods(ev.ns).Delete(context.Background(), "ui-hold-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(ev.t, 30*time.Second, func() bool { return ev.boundCount("ui-gang", 2) == 2 }, "the gang is bound")
	wait("3 binds and the gang gone from the waiting list",
		fmt.Sprintf(`document.querySelector('#binds').textContent === '3' && !document.querySelector('#waiting tr[data-job=%q]')`, job))
	wait("ui-nlp's allocation as 4 of 6 CPU", `document.querySelector('#queues tr[data-queue="ui-nlp"]').textContent.includes('4 / 6')`)
	t.Logf("queue row after the bind: %s", strings.Join(strings.Fields(text(`#queues tr[data-queue="ui-nlp"]`)), " "))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifactDir(t), "ui.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
