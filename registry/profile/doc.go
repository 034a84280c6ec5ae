// Package profile defines profiles: the versioned recipe for one machine (which steps run
// where, which drivers do each job, the image, the user data and the host configuration
// the installed OS converges to).
//
// Define checks a profile document and returns an immutable Profile, or an INVALID_CONFIG
// *proto.Error naming the first offending field in document order. Check runs the same
// walk and returns every problem. Render expands a profile into the steps a workflow runs,
// with places, inputs and timeouts resolved. Shipped returns the profiles metal runs for
// its lifecycle states and for remediation.
//
// docs/profiles.md is the reference of the document: every field, every rule, the step
// catalog and the shipped profiles.
package profile
