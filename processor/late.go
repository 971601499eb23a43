package processor

// CountLate counts the input record being processed as dropped because it
// arrived after its window had closed: weir_records_late_total,
// labelled by thread and task (Kafka Streams' dropped-records sensor for
// late records). ctx is the processor's [Context]. A windowed operator
// of the Processor API calls it once per record it drops as late, and
// logs the record's window at debug level with ctx.Logger, which adds
// the record's coordinates. With a StoreContext that is not weir's, it
// does nothing.
func CountLate(ctx StoreContext) {
	if c, ok := ctx.(interface{ countLate() }); ok {
		c.countLate()
	}
}

func (c *nodeContext[K, V]) countLate() { c.env.CountLate() }
