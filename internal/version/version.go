// Package version says which build of shardsched is running, from what the
// Go toolchain records in every binary (the module version, and for a build
// from a git checkout the commit, its time and whether the tree had
// uncommitted changes): nothing to set at link time, so every binary built
// by `go build` or `go install` reports it.
package version

import (
	"runtime/debug"
	"strings"
)

// String is one line: "v1.2.3" or "(devel)", then the commit (12 hex
// digits, "+dirty" when the tree was modified) and its time, then the Go
// version.
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	return format(bi)
}

func format(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	parts := []string{v}
	if rev != "" {
		c := rev[:min(len(rev), 12)]
		if dirty {
			c += "+dirty"
		}
		parts = append(parts, "commit "+c)
	}
	if at != "" {
		parts = append(parts, at)
	}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	return strings.Join(parts, " ")
}
