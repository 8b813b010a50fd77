package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Go's profiles are served only when Options.Profiling asks for them.
func TestProfilingOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		d := &Daemon{opts: Options{Profiling: on}}
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
			rec := httptest.NewRecorder()
			d.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			switch {
			case on && rec.Code != http.StatusOK:
				t.Errorf("profiling on: GET %s = %d, want 200", path, rec.Code)
			case !on && rec.Code == http.StatusOK:
				t.Errorf("profiling off: GET %s = 200, want it not served", path)
			}
		}
	}
}
