package version

import (
	"runtime/debug"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0 go1.26.0"},
		{"checkout", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) commit 0123456789ab+dirty 2026-11-23T10:00:00Z go1.26.0"},
		{"empty", debug.BuildInfo{}, "(devel)"},
		{"short revision", debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}, "(devel) commit abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := format(&tc.bi); got != tc.want {
				t.Errorf("format = %q, want %q", got, tc.want)
			}
		})
	}
}
