// Package schema is weir's client of a schema registry with the Confluent
// REST API (Confluent Schema Registry, Apicurio Registry's ccompat API,
// Karapace), built on github.com/riferrei/srclient.
//
// # What it adds to srclient
//
//   - Every call takes a context and is retried with exponential backoff
//     while the registry cannot be reached or answers 5xx or 429, for at
//     most [Config.RetryTimeout]; the error then says how long and how often
//     it tried ([*UnreachableError]).
//   - Schemas by id, and ids by subject and schema, are kept in two
//     bounded LRU caches ([Config.CacheSize] entries each, default 1000):
//     a registry's ids are immutable, so a cached entry never goes stale,
//     and the bound keeps a topic full of distinct ids from growing memory.
//     srclient's own caches, which have no bound, are off.
//   - Subject names for topics ([TopicSubject], Confluent's
//     TopicNameStrategy) and for state stores ([StoreSubject]).
//   - Compatibility levels ([Client.SetCompatibility]) and checks
//     ([Client.Check]) that say why a schema was refused
//     ([*IncompatibleError]).
//
// # Subjects and compatibility in weir
//
// weir registers the schemas of every store with Avro serdes before any task
// starts. A store's value subject is set to [BackwardTransitive]: state
// written under every earlier schema must stay readable, since a value may
// sit in a store or a compacted changelog for ever. Key schemas must not
// change, since keys are compared as bytes.
package schema
