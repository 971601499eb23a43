// Package faultproxy is a TCP proxy between Kafka clients and a Kafka broker
// that injects faults into chosen request types, for chaos tests.
//
// The proxy reads Kafka's request framing: every request is an int32 size
// and a payload whose header names the API, its version, a correlation id
// and the client id; responses come back on the same connection in request
// order, each starting with the correlation id. That is enough to hold,
// drop, duplicate or cut a single request type (EndTxn, say) while every
// other byte passes through unchanged. Bodies are not decoded, but for
// Produce's acks: a Produce with acks=0 has no response.
//
// # Setup
//
// A client must reach the broker only through the proxy, so the broker needs
// a listener whose advertised address is the proxy's: a client bootstrapping
// at the proxy then gets metadata (and coordinators) pointing back at it. The
// test broker of this repository has such a listener; its address is in
// WEIR_PROXIED_UPSTREAM and the address it advertises, where the proxy must
// listen, in WEIR_FAULT_PROXY_ADDR.
//
//	p, err := faultproxy.Start(os.Getenv("WEIR_FAULT_PROXY_ADDR"), os.Getenv("WEIR_PROXIED_UPSTREAM"))
//	if err != nil {
//		t.Fatal(err)
//	}
//	defer p.Close()
//	p.Add(faultproxy.Rule{APIs: []faultproxy.APIKey{faultproxy.EndTxn}, Action: faultproxy.DropResponse, Once: true})
//
// # Rules
//
// A [Rule] selects requests by API and client id prefix, says when it fires
// (once, every N-th, with a seeded probability, after skipping some) and
// what it does ([Action]). Rules are evaluated per request in the order they
// were added; the first one that matches and fires acts. [Proxy.Partition]
// and [Proxy.CutAll] act on connections rather than requests.
//
// # Closing
//
// A cut closes the client side of a connection at once. Its upstream side
// stays open until every request the proxy had already accepted from that
// connection was delivered and answered (the answers are discarded), so a
// held request still reaches the broker after its client is gone: the race
// of a late EndTxn landing on a later transaction. [Proxy.Close] ends
// everything at once, held requests included.
package faultproxy
