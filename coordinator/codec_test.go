package coordinator

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardsched/shardsched/api"
)

// batchTransport records the Content-Type of each batch a client sends.
type batchTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	sent []string
}

func (t *batchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/v1/batch") {
		t.mu.Lock()
		t.sent = append(t.sent, r.Header.Get("Content-Type"))
		t.mu.Unlock()
	}
	return t.base.RoundTrip(r)
}

func (t *batchTransport) types() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.sent...)
}

func recordBatches(sh *shard) *batchTransport {
	tr := &batchTransport{base: sh.c.hc.Transport}
	if tr.base == nil {
		tr.base = http.DefaultTransport
	}
	sh.c.hc.Transport = tr
	return tr
}

// The first batch to a leader goes as JSON; its answer says the leader
// reads CBOR, and the batches after it go as CBOR, with every answer the
// same as JSON gives: reservations, their paths and amounts, and a quota
// refusal's figures.
func TestBatchesGoAsCBORToALeaderThatReadsIt(t *testing.T) {
	ev := newEnv(t, 1, 5)
	ev.leader(10 * time.Second)
	ctx := ctxT(t, 30*time.Second)
	for _, jsonOnly := range []bool{false, true} {
		sh := ev.newShardWith("shard-codec", 5, func(cc *ClientConfig) { cc.JSONBatches = jsonOnly })
		tr := recordBatches(sh)
		q := "q-cbor"
		if jsonOnly {
			q = "q-json"
		}
		if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "q-cbor", Capability: limit(t, 4000, 64*gi)}, {Name: "q-json", Capability: limit(t, 4000, 64*gi)}}); err != nil {
			t.Fatal(err)
		}
		gpu := api.NewResource(1000, gi, map[string]int64{"nvidia.com/gpu": 1})
		for i, uid := range []string{"a", "b", "c"} {
			got, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: uid, UID: q + "-" + uid}, q, gpu)
			if err != nil {
				t.Fatalf("reserve %d: %v", i, err)
			}
			r := got.Reservation
			if r.Queue != q || len(r.Path) != 2 || r.Path[1] != "root" || !r.Amount.Equal(gpu) || r.Job.UID != q+"-"+uid {
				t.Fatalf("reserve %d answered %+v", i, r)
			}
		}
		_, err := sh.c.Reserve(ctx, JobRef{Namespace: "ns", Name: "d", UID: q + "-d"}, q, res(2000, gi))
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Queue != q || qe.Resource != api.CPU || qe.Capability != 4000 || qe.Reserved != 3000 || qe.Asked != 2000 || qe.Short != 1000 {
			t.Fatalf("reserve beyond the capability: %v (%+v), want a refusal short 1 CPU", err, qe)
		}
		if _, err := sh.c.Confirm(ctx, q+"-a"); err != nil {
			t.Fatal(err)
		}
		rel, err := sh.c.Release(ctx, q+"-b")
		if err != nil || !rel.Found {
			t.Fatalf("release: found %v, %v", rel.Found, err)
		}
		types := tr.types()
		if len(types) < 6 || types[0] != mediaJSON {
			t.Fatalf("batches sent as %q, want six or more, the first JSON", types)
		}
		want := mediaCBOR
		if jsonOnly {
			want = mediaJSON
		}
		for i, ct := range types[1:] {
			if ct != want {
				t.Errorf("JSONBatches %v: batch %d sent as %q, want %q", jsonOnly, i+2, ct, want)
			}
		}
	}
}

// A leader of an older version reads JSON alone and does not say it reads
// CBOR. A client that was told otherwise at the same address (a rollback)
// has its CBOR batch refused, sends the same batch again as JSON, and
// sends JSON from then on: nothing is lost and nothing applied twice.
func TestBatchToAnOlderLeaderFallsBackToJSON(t *testing.T) {
	ev := newEnv(t, 1, 5)
	lead := ev.leader(10 * time.Second)
	sh := ev.newShard("shard-old", 5)
	ctx := ctxT(t, 30*time.Second)
	if _, err := sh.c.SetQueues(ctx, []api.QueueSpec{{Name: "q", Capability: limit(t, 4000, 64*gi)}}); err != nil {
		t.Fatal(err)
	}
	current := lead.s.handler()
	var mu sync.Mutex
	var seen []string
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Content-Type"))
		mu.Unlock()
		if isCBOR(r.Header) {
			// What the older version's JSON decoder answers.
			w.Header().Set("Content-Type", mediaJSON)
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":"invalid","message":"invalid request body: invalid character"}}` + "\n"))
			return
		}
		current.ServeHTTP(noCodecsHeader{w}, r)
	}))
	defer old.Close()

	sh.c.mu.Lock()
	sh.c.cborAddr = old.URL
	sh.c.mu.Unlock()
	item := func(uid string) []batchItem {
		return []batchItem{{Op: "reserve", Reserve: &ReserveRequest{Job: JobRef{Namespace: "ns", Name: uid, UID: uid}, Queue: "q",
			Amount: res(1000, gi), Lease: int64(sh.session.Lease()), Shard: "shard-old"}}}
	}
	for _, uid := range []string{"a", "b"} {
		replies, err := sh.c.postBatch(old.URL, item(uid))
		if err != nil {
			t.Fatalf("%s: %v", uid, err)
		}
		if rep := replies[0]; rep.Error != nil || rep.Reservation == nil || rep.Reservation.Job.UID != uid || rep.Existed {
			t.Fatalf("%s answered %+v (error %+v)", uid, rep.Reservation, rep.Error)
		}
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if want := []string{mediaCBOR, mediaJSON, mediaJSON}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the older leader was sent %q, want %q", got, want)
	}
	list, err := sh.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Reservations) != 2 {
		t.Errorf("reservations %+v, want a and b once each", list.Reservations)
	}
}

// noCodecsHeader drops the header that says a participant reads CBOR, as
// an older version's answers lack it.
type noCodecsHeader struct{ http.ResponseWriter }

func (w noCodecsHeader) WriteHeader(code int) {
	w.Header().Del(headerCodecs)
	w.ResponseWriter.WriteHeader(code)
}

func (w noCodecsHeader) Write(b []byte) (int, error) {
	w.Header().Del(headerCodecs)
	return w.ResponseWriter.Write(b)
}

// fill sets every exported field reachable from v (a pointer) to a value
// that is not its zero: strings to their field's name, numbers to 7,
// slices and maps to one element, pointers to a filled value. A field
// added to the wire types later is filled too.
func fill(t *testing.T, v reflect.Value, name string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(t, v.Elem(), name)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[api.Limit]() {
			v.Set(reflect.ValueOf(limit(t, 4000, 64*gi)))
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.IsExported() || f.Anonymous {
				fill(t, v.Field(i), f.Name)
			}
		}
	case reflect.String:
		v.SetString(name)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), name)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, name+"-key")
		fill(t, e, name)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Interface:
		// An error (result.err) does not travel.
	default:
		t.Fatalf("%s: fill does not know %s", name, v.Kind())
	}
}

// A batch and its answer, every field of them set, come back from CBOR as
// they come back from JSON, and as they were.
func TestBatchCBORCarriesWhatJSONCarries(t *testing.T) {
	for _, v := range []any{new([]batchItem), new(batchReply)} {
		fill(t, reflect.ValueOf(v), "batch")
		fromJSON, fromCBOR := reflect.New(reflect.TypeOf(v).Elem()), reflect.New(reflect.TypeOf(v).Elem())
		for _, c := range []struct {
			asCBOR bool
			into   reflect.Value
		}{{false, fromJSON}, {true, fromCBOR}} {
			b, err := marshalBody(v, c.asCBOR)
			if err != nil {
				t.Fatal(err)
			}
			if err := decodeBody(bytes.NewReader(b), int64(len(b)), c.into.Interface(), c.asCBOR); err != nil {
				t.Fatalf("CBOR %v: %v", c.asCBOR, err)
			}
		}
		if !reflect.DeepEqual(fromCBOR.Interface(), fromJSON.Interface()) || !reflect.DeepEqual(fromCBOR.Interface(), v) {
			t.Errorf("%T:\nsent      %+v\nfrom JSON %+v\nfrom CBOR %+v", v, reflect.ValueOf(v).Elem(), fromJSON.Elem(), fromCBOR.Elem())
		}
	}
}
