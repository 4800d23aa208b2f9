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
