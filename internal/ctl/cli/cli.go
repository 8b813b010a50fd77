// Package cli is the kubectl plugin's command tree (kubectl shardsched
// explain|queues|shards|top|version) over package ctl. It is a package of
// its own so that the daemon, which serves ctl's views in its web page,
// does not link the plugin's command-line machinery (cobra, cli-runtime and
// what they bring: kustomize, OpenAPI models).
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/shardsched/shardsched/internal/ctl"
	"github.com/shardsched/shardsched/internal/kube"
	"github.com/shardsched/shardsched/internal/version"
)

// options are the flags every subcommand shares.
type options struct {
	kube          *genericclioptions.ConfigFlags
	schedulerName string
	output        string
	streams       genericiooptions.IOStreams
}

func (o *options) client() (ctl.Client, error) {
	cfg, err := o.kube.ToRESTConfig()
	if err != nil {
		return ctl.Client{}, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ctl.Client{}, err
	}
	vc, err := volcano.NewForConfig(cfg)
	if err != nil {
		return ctl.Client{}, err
	}
	return ctl.Client{CS: cs, VC: vc}, nil
}

func (o *options) namespace() (string, error) {
	ns, _, err := o.kube.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

func (o *options) checkOutput() error {
	switch o.output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want json or yaml (or nothing, for text)", o.output)
}

// print writes v as JSON or YAML when -o asks for it, else calls text.
func (o *options) print(v any, text func(io.Writer) error) error {
	switch o.output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.streams.Out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(b)
		return err
	}
	return text(o.streams.Out)
}

// NewCommand is the kubectl plugin: kubectl shardsched explain|queues.
// It honours kubectl's connection flags (--kubeconfig, --context, -n, ...).
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{kube: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:           "kubectl-shardsched",
		Short:         "Why jobs wait and how full queues are, under shardsched",
		Long:          "kubectl shardsched explains, in plain words, why a pod or PodGroup scheduled by shardsched is not running, and shows the queue tree with its quota. It reads only the API server (Queues, PodGroups, pods, nodes, PriorityClasses, events): what a read-only user may read.",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every subcommand prints with -o: checked once, before any runs.
		PersistentPreRunE: func(*cobra.Command, []string) error { return o.checkOutput() },
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&o.schedulerName, "scheduler-name", "volcano", "schedulerName of the pods shardsched serves (its --scheduler-name)")
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "output format: json or yaml (text when empty)")
	root.AddCommand(explainCommand(o), queuesCommand(o), shardsCommand(o), topCommand(o), &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(streams.Out, version.String())
			return err
		},
	})
	return root
}

func explainCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "explain (pod|podgroup) NAME",
		Short: "Say why a pod or PodGroup is not running: quota, its place in its queue, room on the whole cluster",
		Example: `  kubectl shardsched explain podgroup train-llm -n research
  kubectl shardsched explain pod train-llm-worker-3 -n research -o json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return fmt.Errorf("want a kind and a name (explain pod NAME, or explain podgroup NAME), got %d argument(s)", len(args))
			}
			return nil
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return []string{"pod", "podgroup"}, cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			kind := strings.ToLower(args[0])
			switch kind {
			case "pod", "pods", "po":
				kind = "pod"
			case "podgroup", "podgroups", "pg":
				kind = "podgroup"
			default:
				return fmt.Errorf("cannot explain a %q: say pod or podgroup", args[0])
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			w, err := c.World(cmd.Context(), ns)
			if err != nil {
				return err
			}
			e, err := ctl.Explain(w, ctl.ExplainOptions{Kind: kind, Namespace: ns, Name: args[1], SchedulerName: o.schedulerName, Now: time.Now()})
			if err != nil {
				return err
			}
			return o.print(e, func(out io.Writer) error { return ctl.WriteExplanation(out, e) })
		},
	}
}

func queuesCommand(o *options) *cobra.Command {
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "Show the queue tree: capability, deserved, guarantee, allocated and jobs per queue",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval %s: must be positive", interval)
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			show := func(ctx context.Context) error {
				qs, err := c.Queues(ctx)
				if err != nil {
					return err
				}
				rows := ctl.QueueTree(qs)
				return o.print(rows, func(out io.Writer) error { return ctl.WriteQueues(out, rows) })
			}
			if !watch {
				return show(cmd.Context())
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				if o.output == "" {
					// Redraw in place, as watch(1) does.
					fmt.Fprintf(o.streams.Out, "\033[H\033[2J%s\n\n", time.Now().Format(time.TimeOnly))
				}
				if err := show(cmd.Context()); err != nil {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-t.C:
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch redraws")
	return cmd
}

func shardsCommand(o *options) *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Show the shards: up or stale, coordinator leader, partitions and queues held, binds/s, ownership changes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			now := time.Now()
			rs, err := kube.ReadShardStatus(cmd.Context(), c.CS, ns, now)
			if err != nil {
				return err
			}
			ctl.SortShards(rs)
			return o.print(rs, func(out io.Writer) error { return ctl.WriteShards(out, rs, now) })
		},
	}
	cmd.Flags().StringVar(&ns, "shards-namespace", "shardsched", "namespace the shards run in (their status Leases are there)")
	return cmd
}

func topCommand(o *options) *cobra.Command {
	var n int
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the busiest queues, the jobs slowest from creation to bound, and those waiting longest",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 || window <= 0 {
				return fmt.Errorf("--rows %d and --window %s: both must be positive", n, window)
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			w, err := c.World(cmd.Context(), metav1.NamespaceAll)
			if err != nil {
				return err
			}
			t := ctl.MakeTop(w, time.Now(), n, window)
			return o.print(t, func(out io.Writer) error { return ctl.WriteTop(out, t) })
		},
	}
	cmd.Flags().IntVar(&n, "rows", 10, "rows per list")
	cmd.Flags().DurationVar(&window, "window", time.Hour, "slowest jobs among those bound within this long")
	return cmd
}
