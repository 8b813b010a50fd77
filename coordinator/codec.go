package coordinator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fxamacker/cbor/v2"
)

// Batches (POST /v1/batch) travel as CBOR between participants that read
// it, JSON otherwise: a batch's calls and answers are most of what shards
// and the leader say to each other, and CBOR takes about half JSON's CPU
// to write and read. Every answer of a participant that reads CBOR batches
// says so in headerCodecs; a client sends CBOR only to an address that said
// it, so a leader of an older version, which reads JSON alone, is never
// sent what it cannot read (and one that an address stops saying it of, a
// rollback, is sent the batch again as JSON: it read nothing of it).
// Everything else, and every error, stays JSON.
const (
	mediaJSON    = "application/json"
	mediaCBOR    = "application/cbor"
	headerCodecs = "Shardsched-Batch-Codecs"
	codecsCBOR   = "cbor"
)

// speaksCBOR reports whether an answer came from a participant that reads
// CBOR batches.
func speaksCBOR(h http.Header) bool {
	for _, v := range strings.Split(h.Get(headerCodecs), ",") {
		if strings.TrimSpace(v) == codecsCBOR {
			return true
		}
	}
	return false
}

// isCBOR reports whether a body is CBOR by its Content-Type.
func isCBOR(h http.Header) bool { return h.Get("Content-Type") == mediaCBOR }

// marshalBody encodes v as CBOR or JSON.
func marshalBody(v any, asCBOR bool) ([]byte, error) {
	if asCBOR {
		return cbor.Marshal(v)
	}
	return json.Marshal(v)
}

// presizeMax bounds the buffer decodeBody sets aside from a body's
// Content-Length before reading it.
const presizeMax = 256 << 10

// decodeBody decodes r into v as CBOR or JSON; size is the body's length
// when known (its Content-Length), otherwise 0 or less.
func decodeBody(r io.Reader, size int64, v any, asCBOR bool) error {
	if !asCBOR {
		return json.NewDecoder(r).Decode(v)
	}
	// Read in one buffer sized by the body's Content-Length when it gives
	// one (a batch is tens of KiB: growing from nothing copies it several
	// times). Only up to presizeMax: a peer that announces a large body and
	// sends it slowly must not hold that much memory before it arrives.
	var buf bytes.Buffer
	if size > 0 {
		buf.Grow(int(min(size, presizeMax)) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return err
	}
	if err := cbor.Unmarshal(buf.Bytes(), v); err != nil {
		return fmt.Errorf("cbor: %w", err)
	}
	return nil
}
