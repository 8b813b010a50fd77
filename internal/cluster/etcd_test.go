package cluster

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Stopping etcd on purpose makes its listeners fail; those errors are
// dropped then, and only then; any other error still shows.
func TestQuietCloseDropsOnlyServingErrorsWhileClosing(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	closing := new(atomic.Bool)
	lg := zap.New(&quietClose{Core: core, closing: closing}).With(zap.String("member", "coordinator"))
	serving := "setting up serving from embedded etcd failed."
	lg.Error(serving)
	closing.Store(true)
	lg.Error(serving, zap.String("error", "accept tcp: use of closed network connection"))
	lg.Error("failed to save snapshot")
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Message)
	}
	if len(got) != 2 || got[0] != serving || got[1] != "failed to save snapshot" {
		t.Errorf("logged %q; want the serving error before closing and the other error during it", got)
	}
}
