package proto

// MaxProfileDocument bounds a profile document, as given and so as the registry stores
// it (without insignificant white space): registry/profile refuses a larger one, and the
// registry's store checks at start that its etcd cluster takes a record of one
// (registry/store's probe of the cluster's limits).
const MaxProfileDocument = 1 << 20
