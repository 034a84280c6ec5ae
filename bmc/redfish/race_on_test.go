//go:build race

package redfish

// raceDetector is whether the tests run under the race detector, whose instrumented
// runtime allocates more for the same work (TestHugeAnswerBounded's bound doubles).
const raceDetector = true
