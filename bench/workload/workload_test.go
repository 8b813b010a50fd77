package workload

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func loadChurn(t *testing.T) *Workload {
	t.Helper()
	w, err := Load("../workloads/churn.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Every shipped workload file parses and validates.
func TestShippedWorkloadsLoad(t *testing.T) {
	files, err := filepath.Glob("../workloads/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no workload files: %v", err)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// A bad workload file gets an error naming the file and the field.
func TestWorkloadBadInput(t *testing.T) {
	base, err := os.ReadFile("../workloads/churn.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"cpu: 64", "cpu: -1", "node"},
		{"weights: [1, 2, 4]", "weights: [1, 0, 4]", "queues.weights"},
		{"{weight: 5,  size: 128}", "{weight: 5,  size: 0}", "jobs[3]"},
		{"meanSeconds: 60", "meanSeconds: 0", "lifetime"},
		{"kind: drain", "kind: explode", "events[0]"},
		{"parentCapabilityFraction: 0.2", "parentCapabilityFraction: 1.5", "parentCapabilityFraction"},
		{"name: churn", "name: churn\nsurprise: 1", "unknown field"},
		{"kind: deployment,", "kind: daemonset,", "jobs[4]"},
		{"size: 8, minMember: 2}", "size: 8, minMember: 8}", "jobs[5]"},
		{"minMilliCPU: 1}", "minMilliCPU: 1, podGroup: implicit}", "jobs[6]"},
		{"{weight: 10, kind: batch, size: 12, parallelism: 4}", "{weight: 10, kind: batch, size: 12, parallelism: 12}", "jobs[7]"},
		{"maxSize: 32,", "maxSize: 3,", "jobs[4]"},
	} {
		bad := strings.Replace(string(base), tc.from, tc.to, 1)
		if bad == string(base) {
			t.Fatalf("pattern %q not in churn.yaml", tc.from)
		}
		path := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s → %s: got %v, want an error naming %q and the file", tc.from, tc.to, err, tc.want)
		}
	}
	if _, err := loadChurn(t).Tier("3k"); err == nil || !strings.Contains(err.Error(), "100k") {
		t.Errorf("unknown tier: %v, want the list of tiers", err)
	}
}

// The same seed gives the same jobs; the stream has the tier's rate and
// the pod CPU mean of the file.
func TestGeneratorDeterministicAndCalibrated(t *testing.T) {
	w := loadChurn(t)
	tier, _ := w.Tier("100k")
	a, b := NewGenerator(w, tier, 7), NewGenerator(w, tier, 7)
	pods, cpu := 0, int64(0)
	horizon := 10 * time.Minute
	for {
		x, okA := a.Next(horizon)
		y, okB := b.Next(horizon)
		if okA != okB || x != y {
			t.Fatalf("seed 7 diverged: %+v vs %+v", x, y)
		}
		if !okA {
			break
		}
		pods += x.Size
		cpu += x.CPU * int64(x.Size)
	}
	perMin := float64(pods) / horizon.Minutes()
	if math.Abs(perMin-float64(tier.PodsPerMinute))/float64(tier.PodsPerMinute) > 0.1 {
		t.Errorf("%.0f pods/min, want %d ± 10%%", perMin, tier.PodsPerMinute)
	}
	if mean := float64(cpu) / float64(pods) / 1000; mean < 3 || mean > 5 {
		t.Errorf("mean CPU per pod %.2f, want ≈ 4", mean)
	}
	c := NewGenerator(w, tier, 8)
	x, _ := c.Next(horizon)
	y, _ := NewGenerator(w, tier, 7).Next(horizon)
	if x == y {
		t.Errorf("seeds 7 and 8 gave the same first job %+v", x)
	}
}

// Every shipped workload, at every tier, submits each kind as a real
// share of its pods, with the shapes the file declares.
func TestWorkloadMixHasEveryKind(t *testing.T) {
	for _, file := range []string{"churn", "burst"} {
		w, err := Load("../workloads/" + file + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		// The file's weights give each kind ≥ 10 % of the pods.
		want, sum := map[string]float64{}, 0.0
		for _, k := range w.Jobs {
			n := k.meanSize()
			if w.Burst && k.Parallelism > 0 {
				n = float64(k.Parallelism)
			}
			want[k.kind()] += n * float64(k.Weight)
			sum += n * float64(k.Weight)
		}
		for _, k := range []string{KindGang, KindDeployment, KindElastic, KindBatch} {
			if want[k]/sum < 0.10 {
				t.Errorf("%s: the weights give %s %.1f %% of the pods, want ≥ 10 %%", file, k, want[k]/sum*100)
			}
		}
		for name, tier := range w.Tiers {
			g := NewGenerator(w, tier, 11)
			pods := map[string]int{}
			total, jobs := 0, 0
			for jobs < 20000 {
				j, ok := g.Next(10 * time.Minute)
				if !ok {
					break
				}
				jobs++
				n := j.Size
				if w.Burst {
					n = j.EffectiveParallelism()
				}
				pods[j.EffectiveKind()] += n
				total += n
				switch j.EffectiveKind() {
				case KindDeployment:
					if !j.Implicit || j.Size < 4 || j.Size > 32 || j.CPU < 1000 || j.CPU > 4000 || j.EffectiveMinMember() != 1 {
						t.Fatalf("%s/%s: deployment %+v", file, name, j)
					}
				case KindElastic:
					if j.Implicit || j.EffectiveMinMember() >= int32(j.Size) {
						t.Fatalf("%s/%s: elastic %+v has minMember ≥ size", file, name, j)
					}
				case KindBatch:
					if !w.Burst && (j.Size != 12 || j.EffectiveParallelism() != 4) {
						t.Fatalf("%s/%s: batch %+v, want completions 12, parallelism 4", file, name, j)
					}
				}
			}
			// A small backlog (burst 10k: 2,000 pods, a few 128-pod gangs)
			// draws few jobs: a looser bound there.
			least := 0.08
			if total < 10000 {
				least = 0.04
			}
			for _, k := range []string{KindGang, KindDeployment, KindElastic, KindBatch} {
				if share := float64(pods[k]) / float64(total); share < least {
					t.Errorf("%s/%s: %s is %.1f %% of %d pods, want ≥ %.0f %%", file, name, k, share*100, total, least*100)
				}
			}
		}
	}
}
