package processor

// A store's serdes reach the graph (graph.Store.Keys and Values) so that
// the runtime can register the schemas of registry serdes (serde.Avro)
// before any task starts. The method is optional for a StoreSpec: AddStore
// asks for it, and a spec without it has no schemas to check.

// storeSerdes is implemented by the store specs of this package.
type storeSerdes interface {
	serdes() (keys, values any)
}

func (s *KeyValueSpec[K, V]) serdes() (keys, values any)  { return s.base.keys, s.base.values }
func (s *TTLSpec[K, V]) serdes() (keys, values any)       { return s.base.keys, s.base.values }
func (s *WindowSpec[K, V]) serdes() (keys, values any)    { return s.base.keys, s.base.values }
func (s *SessionSpec[K, V]) serdes() (keys, values any)   { return s.base.keys, s.base.values }
func (s *VersionedSpec[K, V]) serdes() (keys, values any) { return s.base.keys, s.base.values }
