package coordinator

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With a token set, the coordinator refuses every call that does not carry
// it (no header, a wrong token, a prefix of it), before reading the call,
// and serves the shards that do.
func TestCoordinatorRefusesUnauthenticatedCalls(t *testing.T) {
	ev := newEnv(t, 0, 5)
	const token = "c2hhcmRzY2hlZC10ZXN0LXRva2VuLTMyLWJ5dGVzIQ"
	ev.cfg.Token = token
	p := ev.add()
	ev.leader(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, header := range []string{"", "Bearer wrong", "Bearer " + token[:len(token)-1], token, "Basic " + token} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, p.s.Addr()+"/v1/queues", strings.NewReader(`[{"name":"evil"}]`))
		if err != nil {
			t.Fatal(err)
		}
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", header, resp.StatusCode)
		}
	}

	// A shard without the token is refused, not retried.
	anon := ev.newShardWith("anon", 5, func(c *ClientConfig) { c.MaxAttempts = 2 })
	if _, err := anon.c.List(ctx); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("List without the token: %v, want ErrUnauthenticated", err)
	}
	// One with it is served, and nothing the refused calls sent was applied.
	sh := ev.newShardWith("shard-0", 5, func(c *ClientConfig) { c.Token = token })
	res, err := sh.c.List(ctx)
	if err != nil {
		t.Fatalf("List with the token: %v", err)
	}
	for _, s := range res.Specs {
		if s.Name == "evil" {
			t.Fatalf("a queue tree sent without the token was applied: %+v", res.Specs)
		}
	}
}
