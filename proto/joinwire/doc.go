// Package joinwire is the wire of the join, shared by the registry and bcd: the pins
// that anchor trust, the well-known document, the join request with its HPKE-sealed
// token, and the signed JoinResponse. Both sides build and check these bytes with this
// one package, so they cannot drift apart.
package joinwire
