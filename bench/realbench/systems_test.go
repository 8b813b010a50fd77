package main

import "testing"

func TestParseShardschedSystems(t *testing.T) {
	for _, c := range []struct {
		name    string
		shards  int
		json    bool
		workers int
	}{
		{"shardsched-1", 1, false, 0},
		{"shardsched-3-json", 3, true, 0},
		{"shardsched-1-bind128", 1, false, 128},
		{"shardsched-2-json-bind64", 2, true, 64},
	} {
		s, err := parseSystem(c.name)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got, ok := s.impl.(shardschedSystem)
		if !ok || s.shards != c.shards || got.shards != c.shards || got.json != c.json || got.bindWorkers != c.workers {
			t.Errorf("%s: %+v %+v, want %d shards, json %v, %d bind workers", c.name, s, got, c.shards, c.json, c.workers)
		}
	}
	for _, bad := range []string{"shardsched-1-bind0", "shardsched-1-bind2000", "shardsched-1-bindx", "shardsched-1-bind-json", "shardsched-0-bind8", "shardsched-1-bind08"} {
		if _, err := parseSystem(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
