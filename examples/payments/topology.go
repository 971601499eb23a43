package main

import (
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Payment is an input record's value: a payment with its id, of amount
// cents (negative for a debit) to the account that is the record's key.
type Payment struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// Balance is an output record's value: the account's balance in cents
// after a payment.
type Balance struct {
	Account string `json:"account"`
	Balance int64  `json:"balance"`
}

// params are what the topology is built from.
type params struct {
	input, output string
	dedupTTL      time.Duration
}

// probes let the embedded run follow the topology: read is called for
// every input record that deserialized, balance for every balance
// written. Both run on the task's goroutine and, after a failure, may run
// again for a record processed again; nil means none.
type probes struct {
	read, balance func()
}

// Topology keeps a running balance per account:
//
//	payments → drop duplicates (TTL store "payment-ids") → repartition by account
//	         → sum the amounts per account (store "balances") → Balance → output
//
// Deduplication needs a store, so it is a Process step, and the DSL
// cannot know that it keeps the key: it marks the stream as re-keyed and
// the aggregation must repartition it first (see the README).
func Topology(p params, pr probes) *kstream.Builder {
	seen := processor.TTL("payment-ids", p.dedupTTL, serde.JSON[paymentRef](), serde.Int64())
	b := kstream.NewBuilder()
	b.Stream("payments", p.input, serde.String(), serde.JSON[Payment]()).
		Peek(func(string, Payment) { call(pr.read) }).
		Process("dedup", func() processor.Processor[string, Payment, string, Payment] {
			return &dedup{spec: seen}
		}, seen).
		Repartition("deduplicated", serde.String(), serde.JSON[Payment]()).
		GroupByKey().
		Aggregate("balances",
			func() int64 { return 0 },
			func(_ string, p Payment, balance int64) int64 { return balance + p.Amount },
			serde.Int64(),
			// A balance after every payment, not the latest per commit.
			kstream.WithoutCache()).
		ToStream().
		Map(func(account string, balance int64) (string, Balance) {
			return account, Balance{Account: account, Balance: balance}
		}, kstream.Named("balance-json")).
		Peek(func(string, Balance) { call(pr.balance) }).
		To(p.output, serde.String(), serde.JSON[Balance]())
	return b
}

// paymentRef names a payment: its account and id. The dedup store is
// keyed by both, so a payment is a duplicate when its account and its id
// match one seen within the TTL, whatever other accounts' payments use
// as ids.
type paymentRef struct {
	Account string `json:"account"`
	ID      string `json:"id"`
}

// dedup forwards a payment the first time its account and id are seen
// within the store's TTL, and drops it after that. The store keeps each
// payment's amount, so that a duplicate that disagrees is logged.
type dedup struct {
	spec *processor.TTLSpec[paymentRef, int64]
	seen processor.TTLStore[paymentRef, int64]
}

func (d *dedup) Init(ctx processor.Context[string, Payment]) (err error) {
	d.seen, err = d.spec.Open(ctx)
	return err
}

func (d *dedup) Process(ctx processor.Context[string, Payment], rec processor.Record[string, Payment]) error {
	if rec.Value.ID == "" {
		// Without an id a payment cannot be told from its duplicates;
		// counting it could count money twice. The line carries the
		// record's coordinates, never its contents.
		ctx.Logger().Warn("payment without an id dropped")
		return nil
	}
	ref := paymentRef{Account: rec.Key, ID: rec.Value.ID}
	amount, found, err := d.seen.Get(ref)
	if err != nil {
		return err
	}
	if found {
		if amount != rec.Value.Amount {
			ctx.Logger().Warn("duplicate payment id with a different amount dropped")
		} else {
			ctx.Logger().Debug("duplicate payment dropped")
		}
		return nil
	}
	if err := d.seen.Put(ref, rec.Value.Amount); err != nil {
		return err
	}
	return ctx.Forward(rec)
}

func (d *dedup) Close() error { return nil }

func call(f func()) {
	if f != nil {
		f()
	}
}
