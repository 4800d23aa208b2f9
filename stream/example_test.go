package stream_test

import (
	"fmt"

	"github.com/orisun-io/orisun/stream"
)

// Where a NATS client finds a boundary's events: one stream per boundary,
// one subject per event type under the boundary's subjects.
func ExampleName() {
	fmt.Println(stream.Name("orders"))
	fmt.Println(stream.Subjects("orders"))
	fmt.Println(stream.Subject("orders", "order.placed"))
	// Output:
	// ORISUN_orders
	// orisun.events.orders.>
	// orisun.events.orders.order.placed
}
