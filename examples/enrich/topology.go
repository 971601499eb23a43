package main

import (
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// Order is a value of the orders topic: an order with its id, of qty
// units of the product whose id is Product, placed by the customer whose
// id is the record's key.
type Order struct {
	ID      string `json:"id"`
	Product string `json:"product"`
	Qty     int64  `json:"qty"`
}

// Customer is a value of the customers topic: the customer whose id is
// the record's key.
type Customer struct {
	Name string `json:"name"`
	Tier string `json:"tier"`
}

// Product is a value of the products topic: the product whose id is the
// record's key, with its unit price in cents.
type Product struct {
	Name  string `json:"name"`
	Price int64  `json:"price"`
}

// Enriched is an output record's value: an order with what the
// application knew of its customer and its product when it processed the
// order. Name is "" and Tier is [UnknownTier] when the customer was not
// known; ProductName is "" and Total 0 when the product was not known.
// Total is Qty times the product's price, in cents.
type Enriched struct {
	Order       string `json:"order"`
	Customer    string `json:"customer"`
	Name        string `json:"name"`
	Tier        string `json:"tier"`
	Product     string `json:"product"`
	ProductName string `json:"product_name"`
	Qty         int64  `json:"qty"`
	Total       int64  `json:"total"`
}

// UnknownTier is the tier of an enriched order whose customer the
// customers table does not hold: never created, or deleted.
const UnknownTier = "unknown"

// params are what the topology is built from: the topics.
type params struct {
	orders, customers, products, output string
}

// probes let the embedded run follow the topology: customer is called
// for every update the customers table passes on (a customer created,
// updated or deleted, and a deletion of one it did not hold), enriched
// for every enriched order written. Both
// run on a task's goroutine and, after a failure, may run again for a
// record processed again; nil means none.
type probes struct {
	customer, enriched func()
}

// Topology enriches every order with its customer and its product:
//
//	customers → table "customers" (store, changelog)
//	products  → global table "products" (every partition on every instance)
//	orders → left join customers by key → left join products by the order's product id → output
//
// The orders stream and the customers table are joined by key, the
// customer id, so their topics must be co-partitioned: the same partition
// count, records keyed alike. The products table is global: an order
// looks its product up by a field of its value, with no repartition by
// product id. Both joins are left joins, so that every order is written,
// also when its customer or its product is unknown (see [Enriched]).
func Topology(p params, pr probes) *kstream.Builder {
	b := kstream.NewBuilder()
	customers := b.Table("customers", p.customers, serde.String(), serde.JSON[Customer]())
	// The table's updates, for the embedded run to know when the table is
	// complete; nothing else reads them.
	customers.ToStream().Foreach(func(string, Customer) { call(pr.customer) })
	products := b.GlobalTable("products", p.products, serde.String(), serde.JSON[Product]())
	b.Stream("orders", p.orders, serde.String(), serde.JSON[Order]()).
		LeftJoin(customers, withCustomer, kstream.Named("join-customers")).
		LeftJoinGlobal(products, productOf, withProduct, kstream.Named("join-products")).
		Peek(func(string, Enriched) { call(pr.enriched) }).
		To(p.output, serde.String(), serde.JSON[Enriched]())
	return b
}

// withCustomer starts the enriched order of o, placed by the customer
// whose id is key, with c when the customers table has it (found).
func withCustomer(key string, o Order, c Customer, found bool) Enriched {
	e := Enriched{Order: o.ID, Customer: key, Tier: UnknownTier, Product: o.Product, Qty: o.Qty}
	if found {
		e.Name, e.Tier = c.Name, c.Tier
	}
	return e
}

// productOf is the key of an enriched order's row in the products table.
func productOf(_ string, e Enriched) string { return e.Product }

// withProduct completes e with its product p when the products table has
// it (found): its name and the order's total.
func withProduct(_ string, e Enriched, p Product, found bool) Enriched {
	if found {
		e.ProductName, e.Total = p.Name, e.Qty*p.Price
	}
	return e
}

// call calls f unless it is nil.
func call(f func()) {
	if f != nil {
		f()
	}
}
