package ctl

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteExplanation prints e for a terminal: the verdict first, then the
// numbers behind it.
func WriteExplanation(w io.Writer, e *Explanation) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", e.Asked)
	fmt.Fprintf(&b, "  PodGroup %s", e.PodGroup)
	if e.Queue != "" {
		fmt.Fprintf(&b, " in queue %s, phase %s, minMember %d; pods: %d pending, %d bound, %d done",
			e.Queue, e.Phase, e.MinMember, e.Pods.Pending, e.Pods.Bound, e.Pods.Done)
	}
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "Why: %s\n", e.Summary)
	if e.Scheduler != nil {
		fmt.Fprintf(&b, "The scheduler says: %s: %s\n", e.Scheduler.Reason, e.Scheduler.Message)
	}
	if len(e.Ask) > 0 {
		fmt.Fprintf(&b, "It asks its queue and every ancestor for: %s\n", dims(e.Ask))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(e.Path) > 0 {
		fmt.Fprintln(w, "\nQueue path (leaf first):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  QUEUE\tCAPABILITY\tHELD BY ADMITTED JOBS\tIN USE BY BOUND PODS\tSHORT FOR THIS JOB")
		for _, l := range e.Path {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", l.Queue, orUnlimited(l.Capability), dims(l.Held), dims(l.InUse), dims(l.Short))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if e.Ahead > 0 {
		fmt.Fprintf(w, "\nAhead of it in queue %s: %d job(s) not admitted yet\n", e.Queue, e.Ahead)
		writeJobs(w, e.AheadJobs, "ASKS")
	}
	if len(e.Holders) > 0 {
		fmt.Fprintf(w, "\nHolding the quota of %s (largest first):\n", e.HoldersOf)
		writeJobs(w, e.Holders, "HOLDS")
	}
	if p := e.Placement; p != nil {
		fmt.Fprintf(w, "\nPlacement over the whole cluster (%d nodes), %d pending pod(s), %d needed at once: ", p.Nodes, p.Pending, p.Needed)
		if p.Fits {
			fmt.Fprintln(w, "they fit now.")
		} else {
			fmt.Fprintf(w, "they do not fit (%d placed before it failed).\n  %s\n", p.Placed, p.Message)
		}
	}
	if len(e.Events) > 0 {
		fmt.Fprintln(w, "\nRecent events:")
		for _, l := range e.Events {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	return nil
}

func orUnlimited(m map[string]string) string {
	if len(m) == 0 {
		return "unlimited"
	}
	return dims(m)
}

func writeJobs(w io.Writer, jobs []JobLine, amount string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  JOB\tQUEUE\tPHASE\tPRIORITY\tAGE\t%s\n", amount)
	for _, j := range jobs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\n", j.Job, j.Queue, j.Phase, j.Priority, j.Age, dims(j.Amount))
	}
	_ = tw.Flush()
}
