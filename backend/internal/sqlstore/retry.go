package sqlstore

import (
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// Retry judges an append some of whose ids are stored; stored holds the
// stored events among its ids, by id. When all are stored, with the same
// content, at consecutive positions in the request's order, the append is
// an idempotent retry (docs/design.md §3) and gets the stored positions,
// first to last. Anything else is ErrConflict naming the first id that
// differs.
func Retry(events []event.Input, stored map[string]event.Event) (first, last uint64, err error) {
	firstStored := -1
	for i := range events {
		if _, ok := stored[events[i].ID]; ok {
			firstStored = i
			break
		}
	}
	first = stored[events[firstStored].ID].Position
	for i := range events {
		in := &events[i]
		e, ok := stored[in.ID]
		if !ok {
			fs := &events[firstStored]
			return 0, 0, fmt.Errorf("%w: events[%d].id %s is already stored at position %d but events[%d].id %s is not; "+
				"a retry must resend exactly the events of the original append, new events need new ids",
				event.ErrConflict, firstStored, fs.ID, stored[fs.ID].Position, i, in.ID)
		}
		if !in.Equal(&e) {
			return 0, 0, fmt.Errorf("%w: events[%d].id %s is already stored at position %d with other content",
				event.ErrConflict, i, in.ID, e.Position)
		}
		if want := events[0].ID; i > 0 && e.Position != first+uint64(i) {
			return 0, 0, fmt.Errorf("%w: events[%d].id %s is stored at position %d, not right after events[0].id %s "+
				"(position %d); a retry must resend the events in their original order",
				event.ErrConflict, i, in.ID, e.Position, want, first)
		}
	}
	return first, first + uint64(len(events)) - 1, nil
}
