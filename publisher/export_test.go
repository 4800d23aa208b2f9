package publisher

// BatchesSent is how many pages p has published as one batch.
func BatchesSent(p *Publisher) uint64 { return p.batches.Load() }
