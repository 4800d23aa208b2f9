package api_test

import (
	"errors"
	"fmt"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
)

// An error reply of the API, decoded from its headers and body as any NATS
// client receives them: errors.Is matches it against the sentinel of its
// code, and a failed condition carries the conflicting position.
func ExampleDecodeError() {
	body := []byte(`{"error":{"code":"conflict","message":"append to \"default\": condition failed","position":8}}`)
	err, ok := api.DecodeError("409", "append to \"default\": condition failed", body)
	fmt.Println(ok, err)
	fmt.Println(errors.Is(err, event.ErrConflict), errors.Is(err, event.ErrNotFound))
	var ce *event.ConflictError
	if errors.As(err, &ce) {
		fmt.Println("conflict at position", ce.Position)
	}
	// Output:
	// true conflict: append to "default": condition failed
	// true false
	// conflict at position 8
}

// The subjects of one boundary.
func ExampleAppendSubject() {
	fmt.Println(api.AppendSubject("orders"))
	fmt.Println(api.ReadSubject("orders"))
	fmt.Println(api.LatestSubject("orders"))
	// Output:
	// orisun.api.append.orders
	// orisun.api.read.orders
	// orisun.api.latest.orders
}

// The error of a read that reached a stored row that does not fit the log
// (changed behind orisun's back): code corrupt, with the row's position and
// column.
func ExampleDecodeError_corrupt() {
	body := []byte(`{"error":{"code":"corrupt","message":"read boundary \"default\" after 0: corrupt: boundary \"default\" position 6, column data: …","position":6,"column":"data"}}`)
	err, _ := api.DecodeError("500", "read boundary \"default\" after 0: corrupt: …", body)
	fmt.Println(err.Code, errors.Is(err, event.ErrCorrupt), errors.Is(err, event.ErrUnavailable))
	var ce *event.CorruptError
	if errors.As(err, &ce) {
		fmt.Println("bad row at position", ce.Position, "column", ce.Column)
	}
	// A 500 without orisun's body is internal, never corrupt.
	other, _ := api.DecodeError("500", "boom", nil)
	fmt.Println(other.Code)
	// Output:
	// corrupt true false
	// bad row at position 6 column data
	// internal
}
