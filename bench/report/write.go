package report

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// File names Write uses inside its directory. The plots are named in Files
// and in the Markdown; see Write.
const (
	MarkdownFile = "report.md"
	JSONFile     = "report.json"
)

// Files are the paths Write wrote, each joined to its dir.
type Files struct {
	Markdown string
	JSON     string
	Plots    []string // SVG files, in the order the Markdown shows them
}

// All returns every path in Files: Markdown, JSON, then the plots.
func (f Files) All() []string {
	return append([]string{f.Markdown, f.JSON}, f.Plots...)
}

// Write creates dir if needed and writes into it report.json (r as
// indented JSON), report.md (r.Markdown) and one SVG per plot that has
// data:
//
//   - latency-cdf.svg: CDF of LatencyCDF, one line per run;
//   - throughput.svg: Throughput over time, one line per run;
//   - utilization.svg: UtilSeries over time, one line per run;
//   - rss.svg: RSSSeries over time, one line per run;
//   - queue-shares-<run>.svg: QueueShares of one run, one line per queue
//     (the ten largest by final share, then "others"), <run> being the run
//     name lower-cased with every other character than a-z and 0-9 turned
//     into "-" (and "-2", "-3", ... when two names end up alike).
//
// When the runs have more than one mode, the latency CDF and throughput
// plots are split per mode: latency-cdf-sim.svg, latency-cdf-real.svg, and
// likewise for throughput. Non-finite samples are left out of the plots.
//
// Every file is written to a temporary name and renamed, so a reader never
// sees half of one; files from an earlier Write that this one does not
// produce are left alone. A value that JSON cannot hold (NaN, ±Inf) fails
// Write before anything is written, with an error naming the field.
func Write(dir string, r Report) (Files, error) {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		if where := nonFinite(r); where != "" {
			return Files{}, fmt.Errorf("report: cannot encode %s: %s", JSONFile, where)
		}
		return Files{}, fmt.Errorf("report: encode %s: %w", JSONFile, err)
	}
	js = append(js, '\n')
	type out struct {
		name string
		data []byte
	}
	outs := []out{{MarkdownFile, []byte(r.Markdown())}, {JSONFile, js}}
	charts := r.charts()
	for _, c := range charts {
		svg, err := c.render("svg")
		if err != nil {
			return Files{}, fmt.Errorf("report: %w", err)
		}
		outs = append(outs, out{c.file, svg})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("report: %w", err)
	}
	var files Files
	for _, o := range outs {
		path := filepath.Join(dir, o.name)
		if err := writeFile(path, o.data); err != nil {
			return files, fmt.Errorf("report: write %s: %w", path, err)
		}
		switch o.name {
		case MarkdownFile:
			files.Markdown = path
		case JSONFile:
			files.JSON = path
		default:
			files.Plots = append(files.Plots, path)
		}
	}
	return files, nil
}

// writeFile replaces path with data through a temporary file in the same
// directory.
func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Read loads a report written by Write (its report.json).
func Read(path string) (Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Report{}, fmt.Errorf("report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, fmt.Errorf("report: %s is not a valid report: %w", path, err)
	}
	return r, nil
}

// nonFinite names the first float in r that is NaN or infinite, as a JSON
// path such as `runs[2].podsPerSec is NaN`, or returns "".
func nonFinite(r Report) string {
	return findNonFinite(reflect.ValueOf(r), "")
}

func findNonFinite(v reflect.Value, path string) string {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Sprintf("%s is %v", path, f)
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return findNonFinite(v.Elem(), path)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if s := findNonFinite(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); s != "" {
				return s
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if s := findNonFinite(it.Value(), fmt.Sprintf("%s[%q]", path, it.Key())); s != "" {
				return s
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				name = f.Name
			}
			if path != "" {
				name = path + "." + name
			}
			if s := findNonFinite(v.Field(i), name); s != "" {
				return s
			}
		}
	}
	return ""
}
