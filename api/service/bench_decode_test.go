package service

import (
	"fmt"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/api"
)

// appendBody is an append request of n events of about size bytes each
// (data, metadata, tags, id): what the hot path decodes.
func appendBody(n, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"events":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"0190b0a0-0000-7000-8000-%012d","type":"order.placed","tags":["order:%d","customer:%d"],`+
			`"metadata":{"by":"web","trace":"4bf92f3577b34da6a3ce929d0e0e4736"},"data":{"order":%d,"customer":"c-%d","lines":[`,
			i, i, i%97, i, i%97)
		for j := 0; b.Len() < (i+1)*size; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"sku":"SKU-%05d","qty":%d,"price":%d.%02d,"note":"gift \"wrap\" {no}"}`, j*7, j%5+1, j*3, j%100)
		}
		b.WriteString(`]}}`)
	}
	b.WriteString(`],"condition":{"query":{"items":[{"types":["order.placed"],"tags":["order:1"]}]},"after":0}}`)
	return []byte(b.String())
}

// benchAppendBody runs step on the append request every benchmark of this
// file measures: 100 events of 1 KB (appendBody), its bytes the
// throughput's unit.
func benchAppendBody(b *testing.B, step func(body []byte) error) {
	body := appendBody(100, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := step(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeAppend: decoding a 100-event append request of 1 KB
// events, as the append endpoint does before anything else.
func BenchmarkDecodeAppend(b *testing.B) {
	benchAppendBody(b, func(body []byte) error {
		var r api.AppendRequest
		return decode(body, &r, "the append request", "events and condition", rawEvents)
	})
}

// BenchmarkDuplicateKeyScan: the duplicate-key check alone, on the body of
// BenchmarkDecodeAppend.
func BenchmarkDuplicateKeyScan(b *testing.B) {
	benchAppendBody(b, func(body []byte) error {
		return duplicateKey(body, rawEvents, "the append request")
	})
}

// BenchmarkDecodeAppendOnePass: decodeAppend, what the append endpoint
// runs, on the body of BenchmarkDecodeAppend (which measures the decoding
// it replaced, and which it falls back to).
func BenchmarkDecodeAppendOnePass(b *testing.B) {
	benchAppendBody(b, func(body []byte) error {
		_, err := decodeAppend(body)
		return err
	})
}
