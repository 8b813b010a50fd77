package coordinator

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/shardsched/shardsched/api"
)

// Scenario files for the coordinator's victim choice
// (testdata/reclaim/*.txt), run against the real Ledger. Run with -rewrite
// to replace the expected output.
//
// Commands:
//
//	tree                      one queue per line of the input:
//	                          NAME [parent=P] [cap=CPU] [deserved=CPU] [guarantee=CPU] [noreclaim] [prio=N]
//	reserve job=J queue=Q cpu=C [prio=P] [age=N] [protected] [reclaim] [confirm]
//	                          a job asks (with reclaim: may take quota back); confirm: its gang
//	                          is bound at once; age: its creation order (higher is younger)
//	grow job=J cpu=C          the job's reservation is resized to C (pods beyond its gang)
//	shrink job=J              a victim that must come down does (resized to its mark's target)
//	release job=J             the job's reservation goes (a victim's pods are gone)
//	state                     every queue's booked cpu and every reservation
//
// Every answer is followed by the quota rule computed from the reservations
// that may cover bound pods (tentative and confirmed, never a nominee):
// a level above its capability is printed as OVERRUN.
func TestReclaimScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/reclaim", func(t *testing.T, path string) {
		l := NewLedger(nil)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return runReclaim(t, l, d)
		})
	})
}

func rcArg(d *datadriven.TestData, key string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "", true
			}
			return a.Vals[0], true
		}
	}
	return "", false
}

func rcInt(t *testing.T, d *datadriven.TestData, key string, def int64) int64 {
	v, ok := rcArg(d, key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", d.Pos, key, v, err)
	}
	return n
}

func rcCPU(n int64) api.Resource { return api.NewResource(n*1000, 0, nil) }

func runReclaim(t *testing.T, l *Ledger, d *datadriven.TestData) string {
	uidOf := func() string { v, _ := rcArg(d, "job"); return v }
	switch d.Cmd {
	case "tree":
		var specs []api.QueueSpec
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			s := api.QueueSpec{Name: f[0]}
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "parent":
					s.Parent = v
				case "cap":
					lim, err := api.NewLimit(map[string]int64{api.CPU: n * 1000})
					if err != nil {
						return err.Error()
					}
					s.Capability = lim
				case "deserved":
					s.Deserved = rcCPU(n)
				case "guarantee":
					s.Guarantee = rcCPU(n)
				case "noreclaim":
					s.NotReclaimable = true
				case "prio":
					s.Priority = int32(n)
				default:
					t.Fatalf("%s: unknown queue field %q", d.Pos, k)
				}
			}
			specs = append(specs, s)
		}
		if _, err := l.SetTree(specs); err != nil {
			return err.Error()
		}
		return "ok"
	case "reserve":
		q, _ := rcArg(d, "queue")
		_, reclaim := rcArg(d, "reclaim")
		_, protected := rcArg(d, "protected")
		uid := uidOf()
		req := ReserveRequest{Job: JobRef{Namespace: "ns", Name: uid, UID: uid}, Queue: q, Amount: rcCPU(rcInt(t, d, "cpu", 1)), Lease: 1, Shard: "s",
			Terms: &Terms{Priority: int32(rcInt(t, d, "prio", 0)), Protected: protected, Created: rcInt(t, d, "age", 0), Reclaim: reclaim}}
		r, existed, err := l.Reserve(req)
		var out string
		switch {
		case err != nil:
			out = err.Error()
		case r.State == Nominated:
			var vs []string
			for _, v := range l.Victims(uid) {
				vs = append(vs, rcVictim(v))
			}
			out = "nominated; victims: " + strings.Join(vs, ", ")
			if len(vs) == 0 {
				out = "nominated; no victim of its own (waits for quota already going)"
			}
		default:
			out = string(r.State)
			if existed {
				out = "existed " + out
			}
		}
		if _, ok := rcArg(d, "confirm"); ok && err == nil && r.State != Nominated {
			if _, err := l.Confirm(uid); err != nil {
				return err.Error()
			}
			out += " → Confirmed"
		}
		return out + "\n" + rcRule(l)
	case "grow":
		_, _, refused, err := l.Resize(ResizeRequest{UID: uidOf(), Targets: []api.Resource{rcCPU(rcInt(t, d, "cpu", 1))}})
		switch {
		case err != nil:
			return err.Error()
		case refused != nil:
			return "refused: " + refused.Error()
		}
		return "ok\n" + rcRule(l)
	case "shrink":
		r, ok := l.Get(uidOf())
		if !ok || r.Evict == nil || r.Evict.Whole {
			return "not marked to come down"
		}
		if _, _, refused, err := l.Resize(ResizeRequest{UID: r.Job.UID, Targets: []api.Resource{r.Evict.To}}); err != nil || refused != nil {
			return fmt.Sprintf("resize: %v %v", err, refused)
		}
		return "ok\n" + rcRule(l)
	case "release":
		if _, found := l.Release(uidOf()); !found {
			return "not found"
		}
		return "ok\n" + rcRule(l)
	case "state":
		var b strings.Builder
		for _, q := range l.Tree().Names() {
			spec, _ := l.Tree().Get(q)
			u := l.Usage(q)
			if u.IsZero() && spec.Capability.IsUnlimited() {
				continue
			}
			fmt.Fprintf(&b, "queue %s: booked %s", q, api.FormatQuantity(api.CPU, u.MilliCPU))
			if c, ok := spec.Capability.Get(api.CPU); ok {
				fmt.Fprintf(&b, " of %s", api.FormatQuantity(api.CPU, c))
			}
			if v := spec.Deserved.MilliCPU; v > 0 {
				fmt.Fprintf(&b, ", deserved %s", api.FormatQuantity(api.CPU, v))
			}
			b.WriteString("\n")
		}
		for _, r := range l.Reservations() {
			fmt.Fprintf(&b, "%s in %s: %s %s", r.Job.Name, r.Queue, api.FormatQuantity(api.CPU, r.Amount.MilliCPU), r.State)
			if r.Evict != nil {
				fmt.Fprintf(&b, ", victim of %s", r.Evict.By.Name)
			}
			b.WriteString("\n")
		}
		return b.String() + rcRule(l)
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

// rcVictim describes a marked reservation.
func rcVictim(v Reservation) string {
	what := "whole"
	if !v.Evict.Whole {
		what = "down to " + api.FormatQuantity(api.CPU, v.Evict.To.MilliCPU)
	}
	return fmt.Sprintf("%s in %s (%s, %s)", v.Job.Name, v.Queue, v.Evict.Reason, what)
}

// rcRule recomputes every level's use from the reservations that may
// cover bound pods (never a nominee's, which covers none) and reports any
// level above its capability.
func rcRule(l *Ledger) string {
	use := map[string]int64{}
	for _, r := range l.Reservations() {
		if r.State == Nominated {
			continue
		}
		p, err := l.Tree().Path(r.Queue)
		if err != nil {
			p = r.Path
		}
		for _, q := range p {
			use[q] += r.Amount.MilliCPU
		}
	}
	var out []string
	names := l.Tree().Names()
	sort.Strings(names)
	for _, q := range names {
		spec, _ := l.Tree().Get(q)
		if c, ok := spec.Capability.Get(api.CPU); ok && use[q] > c {
			out = append(out, fmt.Sprintf("OVERRUN queue %s: %s of %s", q, api.FormatQuantity(api.CPU, use[q]), api.FormatQuantity(api.CPU, c)))
		}
	}
	if len(out) == 0 {
		return "rule ok"
	}
	return strings.Join(out, "\n")
}
